package record

import (
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/flow"
)

// UIDownstream is a downstream as the web UI's Downstreams page shows it:
// one row of the view downstream_status, with its limits, what is in use
// and waiting, its breaker and its counters.
type UIDownstream struct {
	// Name is the downstream's name (flow.New's).
	Name string
	// Limits are the limits in force: as declared, or as a person set them.
	Limits flow.Limits
	// Declared is what code declared last (nil: never declared: a person
	// made the row), by the worker labelled DeclaredBy, at DeclaredAt.
	Declared   *flow.Limits
	DeclaredBy string
	DeclaredAt *time.Time
	// OverriddenAt is when a person changed the limits, as the database
	// role OverriddenBy; nil while they are as declared. Declarations are
	// then recorded, not applied, until the limits are reset.
	OverriddenAt *time.Time
	OverriddenBy string
	// InUse counts the concurrency slots held by live leases now, over
	// every key.
	InUse int64
	// Waiting counts the steps waiting on one of its limits now.
	Waiting int64
	// Keys counts the keys it was called with (one without a key).
	Keys int64
	// Breaker is its circuit breaker's state: flow.BreakerClosed,
	// flow.BreakerOpen or flow.BreakerHalfOpen.
	Breaker string
	// BreakerSince is when the breaker took that state; nil before the
	// downstream's first call.
	BreakerSince *time.Time
	// BreakerManual is set while the breaker is open by a person's hand: it
	// stays open until a person closes it.
	BreakerManual bool
	// OpenUntil is when an open breaker lets a probe through; nil when it
	// is not open, or open by hand.
	OpenUntil *time.Time
	// ProbeRun is the run whose attempt probes a half-open breaker; zero
	// for none.
	ProbeRun uuid.UUID
	// WindowCalls and WindowErrors are the calls that ended, and those
	// that ended in an error, in the breaker's current window.
	WindowCalls, WindowErrors int64
	// RetryTokens is the retry budget's balance: the retries it allows now
	// (nil: no retry was asked yet).
	RetryTokens *float64
	// Admitted counts the attempts admitted, Retries those of them that
	// were retries.
	Admitted, Retries int64
	// DeniedConcurrency, DeniedRate, DeniedBreaker and DeniedRetryBudget
	// count the denials by cause.
	DeniedConcurrency, DeniedRate, DeniedBreaker, DeniedRetryBudget int64
	// Calls and Errors count the calls that ended, and those in an error.
	Calls, Errors int64
}

// UIBreakerChange is a change of a breaker's state: one row of the view
// breaker_history.
type UIBreakerChange struct {
	// ID is its audit_log row's ID, increasing.
	ID int64
	// At is when the breaker moved.
	At time.Time
	// From and To are its states before and after (From empty: the first).
	From, To string
	// Why is what moved it: the note of a person, or what a worker saw
	// ("5 errors in 6 calls within 10000 ms", "the probe succeeded").
	Why string
	// By is who moved it: a worker's label, or "person".
	By string
	// Actor is the database role of the session that moved it.
	Actor string
}

// UILimitChange is a change of a downstream's limits: one audit_log row of
// action 'limits', written by a trigger whatever made the change.
type UILimitChange struct {
	// ID is its audit_log row's ID, increasing.
	ID int64
	// At is when the limits changed.
	At time.Time
	// Before and After are the limits before and after; Before is nil for
	// the row's creation.
	Before, After *flow.Limits
	// By says what changed them: "person", "declaration by <worker>", or
	// "reset to the declaration".
	By string
	// Actor is the database role of the session that changed them.
	Actor string
	// Note is the note given with the change (the web UI's starts with
	// "ui:<who>:"); empty for none.
	Note string
}

// UIWaitingRun is a queued run whose step waits on a downstream's limit
// (runs.waiting_for 'limit:<downstream>'), with its step's open wait.
type UIWaitingRun struct {
	// RunID and Workflow are the run's.
	RunID    uuid.UUID
	Workflow string
	// Step is the step that waits.
	Step int
	// Key is the key its activity calls the downstream with.
	Key string
	// Cause is the limit of its last denial: a flow.Cause* constant.
	Cause string
	// Since is its first denial, Denials how many there were.
	Since   time.Time
	Denials int
	// Due is when the run is due again (a rate, a retry budget, a
	// breaker's probe); zero when it waits for a release to wake it (a
	// slot given back, a breaker closed).
	Due time.Time
}

// UIThrottle is one wait of a run's step on a downstream's limit: a row
// of throttles, from its first denial to its admission.
type UIThrottle struct {
	// Step is the step that waited.
	Step int
	// Attempt is the attempt whose start ended the wait (the one
	// attempt_timeline gives its throttled_for and throttled_by); 0 while
	// it waits.
	Attempt int
	// Downstream and Key are the limit's downstream and the key called.
	Downstream string
	Key        string
	// Cause is the limit of its last denial: a flow.Cause* constant.
	Cause string
	// Denials counts the times the step was denied in this wait.
	Denials int
	// Began is its first denial; Ended its admission, nil while it waits.
	Began time.Time
	Ended *time.Time
}
