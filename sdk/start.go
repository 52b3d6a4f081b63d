package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/store"
)

// StartOption configures one Start.
type StartOption func(*startOptions)

type startOptions struct {
	key      string
	queue    string
	priority int
	delay    time.Duration

	fair       bool // WithFairness was given
	fairKey    string
	fairWeight int
}

// WithKey makes Start idempotent: a second Start with the same key and the
// same input returns the run the first one started (Run.Created is false)
// and starts nothing. Inputs are compared as JSON values, as PostgreSQL's
// jsonb compares them (key order and spacing do not count). The same key
// with another input is an error wrapping ErrKeyConflict, which names the key
// and the run that holds it; so is a key held by a run of another workflow
// (ErrWorkflowMismatch).
func WithKey(key string) StartOption { return func(o *startOptions) { o.key = key } }

// WithQueue puts the run on a queue other than "default"; only workers that
// serve that queue claim it.
func WithQueue(queue string) StartOption { return func(o *startOptions) { o.queue = queue } }

// WithPriority orders runs within a queue: higher first (default 0).
func WithPriority(p int) StartOption { return func(o *startOptions) { o.priority = p } }

// WithDelay makes the run due only after d.
func WithDelay(d time.Duration) StartOption { return func(o *startOptions) { o.delay = d } }

// WithFairness makes the run share its queue fairly with the runs of other
// fairness keys: workers start the queue's runs so that each key that has
// runs waiting gets a share of the throughput proportional to its weight,
// however many runs it has queued. A tenant that enqueues 20,000 runs does
// not make another that enqueues 200 after it wait for them: their runs are
// taken in turn (weights 1 and 3: one of the first for three of the
// second). A key with nothing waiting accrues no credit: its next run
// starts at the queue's current turn. Fairness orders the start of runs
// only; a run that ran before (a retry after a delay, a sleep that ended)
// is claimed as any run is. Runs without a key are not subject to it, and
// go first at equal priority; WithPriority still orders first.
//
// key is the unit of fairness (a tenant, a customer), at most 200 bytes;
// weight is 1 to 1,000,000. An empty key, or a weight out of range, is an
// error at Start. Starts of one key on one queue are serialized for the
// instant of their insert (a StartTx of a key holds up other Starts of that
// key until its transaction ends). docs/fairness.md says more.
func WithFairness(key string, weight int) StartOption {
	return func(o *startOptions) { o.fair, o.fairKey, o.fairWeight = true, key, weight }
}

// WithFairnessKey is WithFairness(key, 1).
func WithFairnessKey(key string) StartOption { return WithFairness(key, 1) }

// Start records a new run of wf with input in and returns its handle once the
// run is committed. Workers that registered wf pick it up. See StartTx to
// start a run inside your own transaction, and StartMany to start many.
//
// Concurrent Start calls on one client share commits: a call that finds no
// insert in progress records its run at once; calls arriving meanwhile wait
// and are recorded together, with one statement, as soon as it returns. An
// idle client adds no latency. One call's bad input never fails another's
// run, and a call whose key is held by a transaction still open (a StartTx
// of that key) waits for it without holding up the others.
//
// Start survives an ambiguous outcome: when the connection fails or the
// statement deadline (WithStatementTimeout) passes while the insert is in
// flight, it may have committed unseen, so Start sends the same insert again,
// up to 4 tries over about a second of pauses, while ctx lasts. The run's ID
// is made by the client and sent again, so the outcome is one run per call,
// with or without a key, and a run the unseen try committed is returned with
// Created true. An error from the database itself (the statement was
// refused) is not retried. When no try settles the outcome, Start returns an
// error wrapping ErrOutcomeUnknown that names the run's ID: the run may exist.
// The same holds when ctx ends while the insert is in flight (the error then
// also wraps ctx's error); when ctx ends before the run was sent, Start
// returns ctx's error and nothing was recorded.
func Start[In, Out any](ctx context.Context, c *Client, wf *Workflow[In, Out], in In, opts ...StartOption) (*Run[Out], error) {
	return start(ctx, c, "sdk.Start", nil, wf, in, opts)
}

// StartTx records a new run of wf inside the caller's transaction tx: the run
// exists if and only if tx commits, so a row you write and the workflow that
// processes it cannot part ways. The transaction is the caller's: StartTx
// neither retries its statement nor gives it a deadline other than ctx's.
func StartTx[In, Out any](ctx context.Context, c *Client, tx pgx.Tx, wf *Workflow[In, Out], in In, opts ...StartOption) (*Run[Out], error) {
	if tx == nil {
		return nil, fmt.Errorf("sdk.StartTx: nil transaction")
	}
	return start(ctx, c, "sdk.StartTx", tx, wf, in, opts)
}

// start records one run on db, or shares a commit with concurrent Starts
// when db is nil. caller is the entry point, named in the errors of its
// arguments.
func start[In, Out any](ctx context.Context, c *Client, caller string, db store.DB, wf *Workflow[In, Out], in In, opts []StartOption) (run *Run[Out], err error) {
	if wf == nil {
		return nil, fmt.Errorf("%s: nil workflow", caller)
	}
	if c == nil {
		return nil, errNilClient
	}
	traceparent, done := c.observe(ctx, wf.name)
	defer func() {
		if run != nil {
			done(run.ID, run.Created, nil)
		} else {
			done(uuid.Nil, false, err)
		}
	}()
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	r, err := c.newRun(wf.name, in, traceparent, opts)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", wf.name, err)
	}
	var ins store.Inserted
	if db == nil {
		expected := c.notices.expect(r.ID) // before the commit: see notices.expect
		ins, err = c.starts.insert(ctx, c, r)
		if expected && (err != nil || !ins.Created || ins.ID != r.ID) {
			c.notices.unexpect(r.ID)
		}
	} else {
		var out []store.Inserted
		if out, err = c.store.InsertRuns(ctx, db, []store.NewRun{r}); err == nil {
			ins = out[0]
		}
	}
	if errors.Is(err, ErrOutcomeUnknown) {
		return nil, fmt.Errorf("start %s: run %s: %w", wf.name, r.ID, err)
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", wf.name, err)
	}
	c.warnIfUnserved(ctx, wf.name, r.Queue)
	return handle[Out](c, wf.name, r.Key, ins)
}

// observe tells the client's StartObserver, if any, that a run of workflow is
// starting; done must be called with the outcome.
func (c *Client) observe(ctx context.Context, workflow string) (traceparent string, done func(uuid.UUID, bool, error)) {
	if c.observer == nil {
		return "", func(uuid.UUID, bool, error) {}
	}
	return c.observer.RunStarting(ctx, workflow)
}

// newRun validates one start and returns the run to record.
func (c *Client) newRun(workflow string, in any, traceparent string, opts []StartOption) (store.NewRun, error) {
	o := startOptions{queue: "default"}
	for _, opt := range opts {
		opt(&o)
	}
	input, err := json.Marshal(in)
	if err != nil {
		return store.NewRun{}, fmt.Errorf("encode input: %w", err)
	}
	if o.fair && o.fairKey == "" {
		return store.NewRun{}, fmt.Errorf("empty fairness key (weight %d)", o.fairWeight)
	}
	r := store.NewRun{Workflow: workflow, Queue: o.queue, Priority: o.priority, Key: o.key,
		Input: input, Delay: o.delay, Traceparent: traceparent, FairKey: o.fairKey, FairWeight: o.fairWeight}
	if err := r.Check(c.maxPayload); err != nil { // the checks of operator.Start too
		return store.NewRun{}, err
	}
	if r.ID, err = uuid.NewV7(); err != nil {
		return store.NewRun{}, fmt.Errorf("new run ID: %w", err)
	}
	return r, nil
}

// handle returns the handle on the run that holds a start's key, refusing a
// run of another workflow or with another input.
func handle[Out any](c *Client, workflow, key string, ins store.Inserted) (*Run[Out], error) {
	if err := ins.Check(workflow, key); err != nil { // the checks of operator.Start too
		return nil, err
	}
	return &Run[Out]{ID: ins.ID, Created: ins.Created, client: c}, nil
}
