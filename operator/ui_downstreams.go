package operator

import (
	"context"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
)

// The web UI's Downstreams page reads and writes flow control through
// these: the SQL views downstream_status and breaker_history and the SQL
// functions set_downstream, reset_downstream, open_breaker and
// close_breaker, so that a change made in the UI is audited as one made in
// SQL or by the CLI is.

// UIDownstreams lists every downstream, by name, with its limits, what is in
// use and waiting, its breaker and its counters (the view
// downstream_status).
func (op *Operator) UIDownstreams(ctx context.Context) ([]record.UIDownstream, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.UIDownstreams(ctx)
}

// UIDownstream reads one downstream as UIDownstreams lists it, or
// ErrNotFound.
func (op *Operator) UIDownstream(ctx context.Context, name string) (record.UIDownstream, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return record.UIDownstream{}, err
	}
	return op.store.UIDownstream(ctx, name)
}

// UIBreakerHistory lists the last limit (0: 50) changes of the downstream's
// breaker, newest first (the view breaker_history).
func (op *Operator) UIBreakerHistory(ctx context.Context, downstream string, limit int) ([]record.UIBreakerChange, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.UIBreakerHistory(ctx, downstream, limit)
}

// UILimitChanges lists the last limit (0: 50) changes of the downstream's
// limits, newest first: the audit_log rows of action 'limits', by
// declarations, people and resets alike.
func (op *Operator) UILimitChanges(ctx context.Context, downstream string, limit int) ([]record.UILimitChange, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.UILimitChanges(ctx, downstream, limit)
}

// UIWaitingOn lists the queued runs that wait on one of the downstream's
// limits, oldest wait first, at most limit (0: 100).
func (op *Operator) UIWaitingOn(ctx context.Context, downstream string, limit int) ([]record.UIWaitingRun, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.UIWaitingOn(ctx, downstream, limit)
}

// UIRunThrottles lists every wait of the run's steps on a downstream's
// limit, in order, each with the attempt whose start ended it (0: it still
// waits).
func (op *Operator) UIRunThrottles(ctx context.Context, run uuid.UUID) ([]record.UIThrottle, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.UIRunThrottles(ctx, run)
}

// UILimitsChange is what UISetLimits changes of a downstream's limits: the
// concurrency limit, the rate limit, or both; the others stay as they are.
type UILimitsChange struct {
	// SetConcurrency changes the concurrency limit to Concurrency (0: no
	// limit).
	SetConcurrency bool
	Concurrency    int
	// SetRate changes the rate limit to Rate (nil: no limit).
	SetRate bool
	Rate    *flow.RateLimit
}

// UISetLimits changes the downstream's limits by c (SQL set_downstream):
// from then on its workers' declarations no longer apply, until
// UIResetLimits. The change is an audit_log row (action 'limits', the
// session's database role, note) and returns the limits now; a change to
// the limits already in force writes none. An unknown downstream is
// ErrNotFound.
func (op *Operator) UISetLimits(ctx context.Context, downstream string, c UILimitsChange, note string) (flow.Limits, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return flow.Limits{}, err
	}
	return op.store.UISetLimits(ctx, downstream, store.UILimitsChange(c), note)
}

// UIResetLimits gives the downstream back to the limits its code declared
// last (SQL reset_downstream), audited with note, and returns them.
func (op *Operator) UIResetLimits(ctx context.Context, downstream, note string) (flow.Limits, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return flow.Limits{}, err
	}
	return op.store.UIResetLimits(ctx, downstream, note)
}

// UIOpenBreaker opens the downstream's breaker by hand (SQL open_breaker):
// no attempt calls it until UICloseBreaker; note is the change's why in
// breaker_history. An unknown downstream is ErrNotFound.
func (op *Operator) UIOpenBreaker(ctx context.Context, downstream, note string) error {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return err
	}
	return op.store.UIOpenBreaker(ctx, downstream, note)
}

// UICloseBreaker closes the downstream's breaker by hand (SQL
// close_breaker), waking every run that waits on it; note is the change's
// why in breaker_history. An unknown downstream is ErrNotFound.
func (op *Operator) UICloseBreaker(ctx context.Context, downstream, note string) error {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return err
	}
	return op.store.UICloseBreaker(ctx, downstream, note)
}
