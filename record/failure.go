package record

import (
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/policy"
)

// Failure is one row of the failures table: why a run gave up. A run has at
// most one open failure (RequeuedAt nil); a requeue closes it and keeps it
// as history.
type Failure struct {
	// ID is the failure row's ID.
	ID int64
	// RunID and Workflow are the failed run's.
	RunID    uuid.UUID
	Workflow string
	// Reason is why the run gave up.
	Reason policy.Reason
	// Step and Activity are the step that gave up and its activity; 0 and
	// empty when the workflow itself failed.
	Step     int
	Activity string
	// Attempts, Errors and Rescues are the step's attempts, those that
	// ended in an error, and those lost and rescued, within its budget.
	Attempts int
	Errors   int
	Rescues  int
	// ErrorMessage, ErrorType and ErrorStack are the last error (its
	// message, its Go type, and the stack of a panic); empty for none.
	ErrorMessage string
	ErrorType    string
	ErrorStack   string
	// FailedAt is when the run gave up.
	FailedAt time.Time
	// RequeuedAt is when the run was requeued, closing this failure; nil
	// while it is open.
	RequeuedAt *time.Time
	// RequeueCount is the run's Requeues after the requeue that closed this
	// failure (1 for the first); 0 while it is open.
	RequeueCount int
}

// FailureCount is one bucket of the failure_buckets function: failures of
// one workflow, activity and reason in one time bucket.
type FailureCount struct {
	// Bucket is the start of the time bucket.
	Bucket time.Time
	// Workflow, Activity and Reason say which failures: Activity is empty
	// when the workflow itself failed.
	Workflow string
	Activity string
	Reason   policy.Reason
	// Failures counts them, requeued ones included.
	Failures int64
	// StillOpen counts those not requeued.
	StillOpen int64
}

// Fingerprint names a group of open failures: same workflow, activity,
// reason and error type, and the same error message once its numbers, UUIDs
// and hex IDs are replaced by placeholders (the SQL function
// failure_fingerprint).
type Fingerprint struct {
	// Workflow is the failed runs' workflow.
	Workflow string
	// Activity is the activity that gave up; empty when the workflow itself
	// failed.
	Activity string
	// Reason is why the runs gave up.
	Reason policy.Reason
	// ErrorType is the Go type of the last error; empty for none.
	ErrorType string
	// Message is the normalised error message.
	Message string
}

// FailureGroup is one group of open failures: its fingerprint, how many,
// when first and last seen, one of its runs, and its failures per time
// bucket.
type FailureGroup struct {
	// Fingerprint names the group.
	Fingerprint
	// Count is how many open failures it has.
	Count int64
	// FirstSeen and LastSeen are its oldest and newest failures' times.
	FirstSeen time.Time
	LastSeen  time.Time
	// SampleRunID is one of its runs.
	SampleRunID uuid.UUID
	// SampleMessage is one member's message as recorded (not normalised).
	SampleMessage string
	// Buckets counts its failures per time bucket (FailureGroups.From and
	// Width), oldest first.
	Buckets []int64
}

// FailureGroups is the answer of operator's FailureGroups: the groups, most
// failures first, the open failures selected in all, and the time axis of
// the buckets.
type FailureGroups struct {
	// Groups are the groups, most failures first, at most the limit asked.
	Groups []FailureGroup
	// Total counts the open failures selected, those of groups past the
	// limit included.
	Total int64
	// From is the start of the first bucket.
	From time.Time
	// Width is the length of a bucket.
	Width time.Duration
}

// FailureGroupFilter selects open failures for FailureGroups,
// OpenFailures and FailureSet; zero fields match everything. A FailureSet
// carries the one it was read with, so it is a record too.
type FailureGroupFilter struct {
	// Workflow, Activity and Reason, when set, keep the failures of that
	// workflow, activity and reason.
	Workflow string
	Activity string
	Reason   policy.Reason
	// Since, when set, keeps the failures at or after it.
	Since time.Time
	// Until, when set, keeps the failures before it: with Since, a fixed
	// window, which a preview of a requeue sets so that its confirm acts on
	// the same failures however long after (failures that come meanwhile
	// come after Until).
	Until time.Time
	// Key, when set, keeps the failure of the run started with that key
	// (sdk.WithKey).
	Key string
	// Fingerprint, when set, keeps the failures of that one group.
	Fingerprint *Fingerprint
}

// FailureSet is the open failures a filter selects in a fixed window,
// counted, broken down and named in SQL: however many they are, the client
// reads a few rows.
type FailureSet struct {
	// Filter is the filter the set was read with, its window fixed: Until,
	// when the filter had none, is the database's now() at the read. A
	// requeue of the set (operator's RequeueSet.Filter) selects it again
	// with it.
	Filter FailureGroupFilter
	// Count is how many open failures the set has.
	Count int64
	// Oldest and Newest are its first and last failures' times (zero:
	// empty).
	Oldest, Newest time.Time
	// Breakdown counts the set by workflow, activity and reason, most
	// failures first.
	Breakdown []FailureSetGroup
	// Digest names the set's failure rows (the SQL function
	// failure_set_digest of their IDs): a requeue of the set is refused once
	// the set no longer has it.
	Digest string
}

// FailureSetGroup is one line of a FailureSet's breakdown.
type FailureSetGroup struct {
	// Workflow, Activity and Reason say which failures: Activity is empty
	// when the workflow itself failed.
	Workflow string
	Activity string
	Reason   policy.Reason
	// Failures counts them.
	Failures int64
}
