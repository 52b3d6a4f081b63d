package riveradapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tenurehq/tenure/policy"
)

// Retry decides River jobs' failed attempts by Tenure retry policies, one
// per job kind. It is both River's retry policy and a worker middleware:
// install it with Configure. Its methods are safe for concurrent use.
type Retry struct {
	river.WorkerMiddlewareDefaults

	kinds    map[string]policy.Retry
	fallback river.ClientRetryPolicy
	rec      *recorder // nil without Record

	mu   sync.Mutex
	next map[attemptKey]decided // the middleware's decisions, for NextRetry
}

type attemptKey struct {
	job     int64
	attempt int
}

type decided struct {
	at   time.Time
	made time.Time
}

// Option configures a Retry.
type Option func(*Retry) error

// Kind gives the jobs of kind the retry policy p (policy.New makes one
// from Tenure's options). It is an error to name a kind twice or to give a
// policy that fails policy.Retry.Validate.
func Kind(kind string, p policy.Retry) Option {
	return func(r *Retry) error {
		if kind == "" {
			return errors.New("riveradapter: Kind: empty job kind")
		}
		if _, dup := r.kinds[kind]; dup {
			return fmt.Errorf("riveradapter: Kind %q given twice", kind)
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("riveradapter: Kind %q: %w", kind, err)
		}
		r.kinds[kind] = p
		return nil
	}
}

// Fallback is the retry policy of the kinds without a policy of their own,
// and of the attempts the middleware did not decide; River's default
// (river.DefaultClientRetryPolicy) if not given.
func Fallback(p river.ClientRetryPolicy) Option {
	return func(r *Retry) error {
		if p == nil {
			return errors.New("riveradapter: Fallback: nil retry policy")
		}
		r.fallback = p
		return nil
	}
}

// NewRetry returns a Retry with the given options; at least one Kind.
func NewRetry(opts ...Option) (*Retry, error) {
	r := &Retry{kinds: map[string]policy.Retry{}, fallback: &river.DefaultClientRetryPolicy{}, next: map[attemptKey]decided{}}
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, err
		}
	}
	if len(r.kinds) == 0 {
		return nil, errors.New("riveradapter: NewRetry: no job kind has a policy (give riveradapter.Kind)")
	}
	return r, nil
}

// Configure installs r in a River client's configuration, before
// river.NewClient: as its RetryPolicy (the one it had becomes r's fallback,
// unless Fallback was given), and last among its Middleware, the nearest
// the job: a middleware before it (a tracing one) wraps the attempt, and
// the span it puts in the job's context is the one Record writes down. It
// raises
// cfg.MaxAttempts, the default of the jobs inserted without one, to the
// largest MaxAttempts of r's policies, so that River's own count does not
// discard a job before its policy gives up; a job inserted with a lower
// MaxAttempts of its own is still discarded by River at it.
func (r *Retry) Configure(cfg *river.Config) error {
	if cfg == nil {
		return errors.New("riveradapter: Configure: nil *river.Config")
	}
	if cfg.RetryPolicy == r {
		return errors.New("riveradapter: Configure: already installed in this configuration")
	}
	if cfg.RetryPolicy != nil {
		if _, dflt := r.fallback.(*river.DefaultClientRetryPolicy); dflt {
			r.fallback = cfg.RetryPolicy
		}
	}
	cfg.RetryPolicy = r
	cfg.Middleware = append(cfg.Middleware, r)
	if r.rec != nil {
		if cfg.Schema != "" {
			r.rec.river = pgx.Identifier{cfg.Schema}.Sanitize() + "."
		}
		if cfg.RescueStuckJobsAfter > 0 {
			r.rec.lease = cfg.RescueStuckJobsAfter
		}
		for kind, p := range r.kinds {
			r.rec.policies[kind] = policyJSON(p)
		}
		r.rec.logger = cfg.Logger
		if r.rec.logger == nil {
			r.rec.logger = slog.Default()
		}
	}
	most := 0
	for _, p := range r.kinds {
		most = max(most, p.MaxAttempts)
	}
	if cfg.MaxAttempts != 0 && cfg.MaxAttempts < most || cfg.MaxAttempts == 0 && most > river.MaxAttemptsDefault {
		cfg.MaxAttempts = most
	}
	return nil
}

// Work is the middleware: it runs the job and, when the attempt fails,
// decides it by the kind's policy (see the package documentation); with
// Record, it writes the attempt's start before the job runs and its end
// after, and cancels, before it runs, a job whose lost attempts passed its
// kind's MaxRescues.
func (r *Retry) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	p, ok := r.kinds[job.Kind]
	if r.rec == nil && !ok {
		return doInner(ctx)
	}
	// A first attempt (River's attempt 1, no error yet) is written after it
	// ran, with its run, in one statement; a later one before and after.
	fresh := r.rec != nil && job.Attempt == 1 && len(job.Errors) == 0 && !snoozed(job)
	var b beginRes
	if r.rec != nil && !fresh {
		var err error
		if b, err = r.rec.begin(ctx, job, p, ok); err != nil {
			return fmt.Errorf("riveradapter: record the start of job %d's attempt: %w", job.ID, err)
		}
		if b.verdict == string(policy.RescuesExhausted) {
			return river.JobCancel(fmt.Errorf("%s (Tenure policy of kind %s): %d attempts lost, more than MaxRescues %d",
				policy.RescuesExhausted, job.Kind, b.rescues, p.MaxRescues))
		}
	}
	st := &attemptState{r: r, job: job, p: p, hasPolicy: ok, fresh: fresh, b: b}
	panicked, err := recovered(context.WithValue(ctx, attemptKeyCtx{}, st), doInner)
	end, ret := r.decide(ctx, job, p, ok, b, err)
	// An end written by CompleteTx in the worker's transaction is not
	// written again; one whose transaction rolled back (the job failed)
	// is, river_end's fence keeping a committed one as it is.
	if r.rec != nil && (!st.inTx || err != nil) {
		rerr := r.record(ctx, job, p, ok, fresh, b, end)
		if rerr != nil {
			// What River does with the job stands (a job that did its work
			// is not run again for a record); the attempt stays running in
			// Tenure until the reconciler or the job's next attempt closes
			// it, as lost.
			r.rec.logger.Warn("riveradapter: could not record the end of a River job's attempt in Tenure; "+
				"it shows as running until the reconciler or the next attempt closes it as lost",
				"job", job.ID, "kind", job.Kind, "river_attempt", job.Attempt, "status", end.status, "error", rerr)
		}
	}
	if panicked != nil && !ok {
		panic(panicked) // a kind without a policy: River's HandlePanic, as before
	}
	return ret
}

// record writes the attempt's end: a first attempt with its run
// (river_first; river_late if the job had a run already: River rescued
// this attempt as stuck and the next began elsewhere), a later one with
// river_end.
func (r *Retry) record(ctx context.Context, job *rivertype.JobRow, p policy.Retry, hasPolicy, fresh bool, b beginRes, end endReq) error {
	if fresh {
		done, err := r.rec.first(ctx, job, p, hasPolicy, end)
		if err != nil || done {
			return err
		}
		return r.rec.late(ctx, r.rec.pool, false, job, end)
	}
	end.run, end.attempt = b.run, b.attempt
	_, err := r.rec.end(ctx, end)
	return err
}

// snoozed reports whether River snoozed job before (its metadata counts
// the snoozes): River then lowered its attempt, so attempt 1 does not mean
// a first attempt.
func snoozed(job *rivertype.JobRow) bool {
	if len(job.Metadata) == 0 || !bytes.Contains(job.Metadata, []byte(`"snoozes"`)) {
		return false
	}
	var m struct {
		Snoozes int `json:"snoozes"`
	}
	return json.Unmarshal(job.Metadata, &m) != nil || m.Snoozes > 0
}

// decide is the attempt's outcome: what to return to River, and what to
// record.
func (r *Retry) decide(ctx context.Context, job *rivertype.JobRow, p policy.Retry, hasPolicy bool, b beginRes, err error) (endReq, error) {
	if err == nil {
		return endReq{status: "succeeded"}, nil
	}
	end := endReq{status: "failed", msg: text(err.Error()), typ: text(typeName(err))}
	var cancel *river.JobCancelError
	var snooze *river.JobSnoozeError
	switch {
	case errors.As(err, &snooze):
		ms, src := snooze.Duration.Milliseconds(), string(policy.SourceRetryAfter)
		end.status, end.delayMS, end.source, end.msg = "snoozed", &ms, &src, nil
		return end, err
	case errors.As(err, &cancel):
		reason := string(policy.NonRetryable)
		end.reason = &reason
		return end, err
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// The client is stopping or the job's timeout passed: River retries
		// it by its own policy.
		end.status = "interrupted"
		return end, err
	case !hasPolicy:
		return end, err // River decides; the reconciler sees a discard
	}
	h := policy.History{
		Attempt: job.Attempt,
		Errors:  job.Attempt, // River charges every fetch: see the package documentation
		Elapsed: time.Since(job.CreatedAt),
		Err:     err,
		Seed:    policy.Seed("river:"+strconv.FormatInt(job.ID, 10), 1, job.Attempt),
	}
	if r.rec != nil {
		// Tenure's own count: errors since the budget (a requeue's fresh
		// one), this one included; lost attempts are charged to MaxRescues.
		// A first attempt (not begun: b is zero) has none before it.
		h.Errors, h.Rescues = b.errors+1, b.rescues
		if b.attempt > 0 {
			h.Attempt, h.Seed = b.attempt, policy.Seed(b.run.String(), 1, b.attempt)
		}
	}
	if _, hinted := policy.RetryAfterOf(err); hinted {
		// A snooze is no attempt to River: nor is it charged here, unless
		// the policy takes no hints and the attempt is an error after all.
		h.Errors--
		if d := p.Decide(h); d.Retry && d.Source == policy.SourceRetryAfter {
			ms, src := d.Delay.Milliseconds(), string(d.Source)
			end.status, end.delayMS, end.source = "snoozed", &ms, &src
			return end, river.JobSnooze(d.Delay)
		}
		h.Errors++
	}
	d := p.Decide(h)
	if !d.Retry {
		reason := string(d.Reason)
		end.reason = &reason
		return end, river.JobCancel(fmt.Errorf("%s (Tenure policy of kind %s, attempt %d): %w", d.Reason, job.Kind, job.Attempt, err))
	}
	ms, src := d.Delay.Milliseconds(), string(d.Source)
	end.delayMS, end.source = &ms, &src
	now := time.Now()
	r.mu.Lock()
	r.next[attemptKey{job.ID, job.Attempt}] = decided{at: now.Add(d.Delay), made: now}
	if len(r.next) > 10_000 {
		r.forget(now)
	}
	r.mu.Unlock()
	return end, err
}

// forget drops the decisions River never asked for (a job it discarded by
// its own MaxAttempts); r.mu is held.
func (r *Retry) forget(now time.Time) {
	for k, v := range r.next {
		if now.Sub(v.made) > time.Minute {
			delete(r.next, k)
		}
	}
}

// NextRetry is River's retry policy: the time the middleware decided for
// the attempt that just failed, or the fallback's.
func (r *Retry) NextRetry(job *rivertype.JobRow) time.Time {
	k := attemptKey{job.ID, job.Attempt}
	r.mu.Lock()
	v, ok := r.next[k]
	delete(r.next, k)
	r.mu.Unlock()
	if ok {
		return v.at
	}
	return r.fallback.NextRetry(job)
}

// recovered runs doInner, turning a panic into an error that carries its
// value and stack, so that the kind's policy decides it as any error (River
// would retry a panic by its own policy and count); it returns the panic's
// value too.
func recovered(ctx context.Context, doInner func(context.Context) error) (panicked any, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked, err = p, fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return nil, doInner(ctx)
}

// typeName is the Go type of the error an attempt ended with, the
// innermost of a chain of wrapping.
func typeName(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return fmt.Sprintf("%T", err)
		}
		err = next
	}
}
