package runtime

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// Observer receives what a worker does, as it happens: the hooks the otel
// package implements to trace every attempt and count outcomes. The runtime
// itself depends on no telemetry library. Hooks are called on the goroutine
// doing the work and must return quickly; a nil Config.Observer observes
// nothing.
type Observer interface {
	// SegmentStarted is called when the worker takes a run's lease: one
	// execution segment of the run, until it completes, fails, suspends, is
	// handed over or its lease is lost. The context it returns (carrying the
	// segment's span) is the parent of the run's attempts.
	SegmentStarted(ctx context.Context, s Segment) context.Context
	// SegmentEnded is called once per segment, with how it ended.
	SegmentEnded(ctx context.Context, s Segment, end SegmentEnd)
	// AttemptStarted is called before an attempt's row is written. The
	// context it returns is the activity's context (carrying the attempt's
	// span, so the activity's own spans nest under it); ref names that span
	// and is stored on the attempt's row.
	AttemptStarted(ctx context.Context, a Attempt) (actx context.Context, ref TraceRef)
	// AttemptEnded is called when an attempt ended, after its outcome is
	// recorded (or found unrecordable, for a lost lease).
	AttemptEnded(ctx context.Context, a Attempt, end AttemptEnd)
	// AttemptLost is called when a rescue finds an attempt a previous lease
	// holder left running: its outcome is unknown. startedAt is when it
	// started, by the database clock, and ref its recorded trace IDs.
	AttemptLost(ctx context.Context, a Attempt, startedAt time.Time, ref TraceRef)
	// LeaseLost is called when the worker finds it lost a run's lease.
	LeaseLost(ctx context.Context, s Segment)
}

// Segment describes one execution segment of a run on one worker.
type Segment struct {
	RunID    uuid.UUID
	Workflow string
	Queue    string
	Epoch    int64
	Worker   string
	// Traceparent is the W3C trace context captured when the run started, or "".
	Traceparent string
	// Reclaimed is true when the segment began by taking over an expired lease.
	Reclaimed bool
	// QueueLag is how long the run was due before this worker claimed it.
	QueueLag time.Duration
}

// Segment outcomes.
const (
	SegmentCompleted = "completed" // the run completed
	SegmentFailed    = "failed"    // the run failed (it has a failure row)
	SegmentCancelled = "cancelled" // the run ended cancelled, after its Cancel
	SegmentSuspended = "suspended" // released with a durable delay, or to wait for a signal or a child
	SegmentReleased  = "released"  // handed back at shutdown
	SegmentLost      = "lost"      // the lease was lost; nothing more was written
	SegmentAbandoned = "abandoned" // an infrastructure error; the lease will expire
)

// SegmentEnd is how a segment ended.
type SegmentEnd struct {
	Outcome string     // a Segment* constant
	Reason  sdk.Reason // the failure reason, for SegmentFailed
	Error   string     // the failure's or the abandonment's error, if any
	// RunDuration is the run's age when it completed or failed, by the
	// database clock; 0 otherwise.
	RunDuration time.Duration
}

// Attempt describes one attempt of a step.
type Attempt struct {
	RunID       uuid.UUID
	Workflow    string
	Activity    string
	Step        int
	Attempt     int
	MaxAttempts int
	Errors      int  // attempts of this step that ended in an error before this one
	Rescues     int  // attempts of this step that were lost before this one
	Rescue      bool // this attempt follows a lost one
	Epoch       int64
	Worker      string
	// Previous names the span of the step's previous attempt, if any, so
	// that retries can be linked.
	Previous TraceRef
	// Downstream is the downstream the step's activity calls
	// (activities.Activity.Calls), or "": an attempt of such a step is
	// admitted under its limits once AttemptStarted returned, or denied
	// (see FlowObserver), and only then recorded.
	Downstream string
}

// Attempt outcomes, as recorded in the attempts table.
//
// Deprecated: use the record names (record.AttemptSucceeded, ...), of which these
// are aliases.
const (
	AttemptSucceeded   = record.AttemptSucceeded
	AttemptFailed      = record.AttemptFailed
	AttemptTimedOut    = record.AttemptTimedOut
	AttemptLost        = record.AttemptLost
	AttemptInterrupted = record.AttemptInterrupted
)

// AttemptEnd is how an attempt ended.
type AttemptEnd struct {
	// Outcome is the attempt's status: record.AttemptSucceeded, AttemptFailed,
	// AttemptTimedOut, AttemptLost or AttemptInterrupted; or AttemptThrottled
	// for an attempt a downstream's limit denied, which was never recorded
	// nor invoked.
	Outcome  record.AttemptStatus
	Err      error // the error it returned, if any
	Duration time.Duration
	// Delay is the delay chosen before the next attempt, when one follows an
	// error; DelaySource says where it came from (policy, jitter, retry-after).
	Delay       *time.Duration
	DelaySource string
	// GaveUp is the step's failure reason when this attempt made it give up.
	GaveUp sdk.Reason
}

// TraceRef names a span by its hex trace and span IDs; empty when not traced.
type TraceRef struct {
	TraceID string
	SpanID  string
}

// nopObserver observes nothing.
type nopObserver struct{}

func (nopObserver) SegmentStarted(ctx context.Context, _ Segment) context.Context { return ctx }
func (nopObserver) SegmentEnded(context.Context, Segment, SegmentEnd)             {}
func (nopObserver) AttemptStarted(ctx context.Context, _ Attempt) (context.Context, TraceRef) {
	return ctx, TraceRef{}
}
func (nopObserver) AttemptEnded(context.Context, Attempt, AttemptEnd)         {}
func (nopObserver) AttemptLost(context.Context, Attempt, time.Time, TraceRef) {}
func (nopObserver) LeaseLost(context.Context, Segment)                        {}
