package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/store"
)

// StartOption configures one Start.
type StartOption func(*startOptions)

type startOptions struct {
	key      string
	queue    string
	priority int
	delay    time.Duration
}

// WithKey makes Start idempotent: a second Start with the same key returns the
// run the first one started (Run.Created is false) and starts nothing.
func WithKey(key string) StartOption { return func(o *startOptions) { o.key = key } }

// WithQueue puts the run on a queue other than "default"; only workers that
// serve that queue claim it.
func WithQueue(queue string) StartOption { return func(o *startOptions) { o.queue = queue } }

// WithPriority orders runs within a queue: higher first (default 0).
func WithPriority(p int) StartOption { return func(o *startOptions) { o.priority = p } }

// WithDelay makes the run due only after d.
func WithDelay(d time.Duration) StartOption { return func(o *startOptions) { o.delay = d } }

// Start records a new run of wf with input in and returns its handle. Workers
// that registered wf pick it up. See StartTx to start a run inside your own
// transaction.
func Start[In, Out any](ctx context.Context, c *Client, wf *Workflow[In, Out], in In, opts ...StartOption) (*Run[Out], error) {
	return start(ctx, c, c.store.Pool(), wf, in, opts)
}

// StartTx records a new run of wf inside the caller's transaction tx: the run
// exists if and only if tx commits, so a row you write and the workflow that
// processes it cannot part ways.
func StartTx[In, Out any](ctx context.Context, c *Client, tx pgx.Tx, wf *Workflow[In, Out], in In, opts ...StartOption) (*Run[Out], error) {
	return start(ctx, c, tx, wf, in, opts)
}

func start[In, Out any](ctx context.Context, c *Client, db store.DB, wf *Workflow[In, Out], in In, opts []StartOption) (run *Run[Out], err error) {
	if wf == nil {
		return nil, fmt.Errorf("sdk.Start: nil workflow")
	}
	traceparent := ""
	if c.observer != nil {
		var done func(uuid.UUID, bool, error)
		traceparent, done = c.observer.RunStarting(ctx, wf.name)
		defer func() {
			if run != nil {
				done(run.ID, run.Created, err)
			} else {
				done(uuid.Nil, false, err)
			}
		}()
	}
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	o := startOptions{queue: "default"}
	for _, opt := range opts {
		opt(&o)
	}
	if o.queue == "" {
		return nil, fmt.Errorf("start %s: empty queue name", wf.name)
	}
	if o.delay < 0 {
		return nil, fmt.Errorf("start %s: negative delay %s", wf.name, o.delay)
	}
	input, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("start %s: encode input: %w", wf.name, err)
	}
	if len(input) > c.maxPayload {
		return nil, fmt.Errorf("start %s: input is %d bytes, limit %d: %w", wf.name, len(input), c.maxPayload, ErrPayloadTooLarge)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("start %s: new run ID: %w", wf.name, err)
	}
	id, workflow, created, err := c.store.InsertRun(ctx, db, store.NewRun{
		ID: id, Workflow: wf.name, Queue: o.queue, Priority: o.priority, Key: o.key,
		Input: input, Delay: o.delay, Traceparent: traceparent,
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", wf.name, err)
	}
	if workflow != wf.name {
		return nil, fmt.Errorf("start %s: key %q already names run %s of workflow %q: %w", wf.name, o.key, id, workflow, ErrWorkflowMismatch)
	}
	return &Run[Out]{ID: id, Created: created, client: c}, nil
}
