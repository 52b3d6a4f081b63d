package sdk

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/store"
)

// StartParams is one run for StartMany: its input and its options (WithKey,
// WithQueue, WithPriority, WithDelay, WithFairness), as they would be passed
// to Start.
type StartParams[In any] struct {
	Input   In
	Options []StartOption
}

// StartMany records one run of wf per element of params, all in one
// transaction with one INSERT, and returns their handles in the order of
// params. Runs are validated as by Start; an invalid element fails the call
// and nothing is recorded. Elements sharing a key make one run: the first is
// created, the others with the same input get its handle with Created false.
//
// Like Start, StartMany sends its insert again after an ambiguous outcome, so
// each element still makes at most one run (its ID is sent again) and the
// runs an unseen try committed are returned created; when no try settles the
// outcome, the error wraps ErrOutcomeUnknown: the runs may exist.
//
// When keys name runs of another workflow, or runs (or earlier elements)
// with another input, StartMany returns an error wrapping
// ErrWorkflowMismatch or ErrKeyConflict for each of them together with the
// handles: the other runs are recorded and their handles set, the refused
// elements' handles are nil.
func StartMany[In, Out any](ctx context.Context, c *Client, wf *Workflow[In, Out], params []StartParams[In]) ([]*Run[Out], error) {
	return startMany(ctx, c, "sdk.StartMany", nil, wf, params)
}

// StartManyTx is StartMany inside the caller's transaction tx: the runs exist
// if and only if tx commits. As with StartTx, its statement is neither
// retried nor given a deadline other than ctx's.
func StartManyTx[In, Out any](ctx context.Context, c *Client, tx pgx.Tx, wf *Workflow[In, Out], params []StartParams[In]) ([]*Run[Out], error) {
	if tx == nil {
		return nil, fmt.Errorf("sdk.StartManyTx: nil transaction")
	}
	return startMany(ctx, c, "sdk.StartManyTx", tx, wf, params)
}

// startMany records the runs on db, or on the pool with retries when db is
// nil. caller is the entry point, named in the errors of its arguments.
func startMany[In, Out any](ctx context.Context, c *Client, caller string, db store.DB, wf *Workflow[In, Out], params []StartParams[In]) (runs []*Run[Out], err error) {
	if wf == nil {
		return nil, fmt.Errorf("%s: nil workflow", caller)
	}
	if c == nil {
		return nil, errNilClient
	}
	dones := make([]func(uuid.UUID, bool, error), len(params))
	errs := make([]error, len(params)) // each element's own failure, if any
	defer func() {
		for i, done := range dones {
			switch {
			case done == nil:
			case runs != nil && runs[i] != nil:
				done(runs[i].ID, runs[i].Created, nil)
			case errs[i] != nil:
				done(uuid.Nil, false, errs[i])
			default:
				done(uuid.Nil, false, err)
			}
		}
	}()
	news := make([]store.NewRun, len(params))
	for i, p := range params {
		var traceparent string
		traceparent, dones[i] = c.observe(ctx, wf.name)
		if i == 0 {
			if err := c.ready(ctx); err != nil {
				return nil, err
			}
		}
		if news[i], err = c.newRun(wf.name, p.Input, traceparent, p.Options); err != nil {
			errs[i] = fmt.Errorf("start %s: %w", wf.name, err)
			return nil, fmt.Errorf("start %s: params[%d]: %w", wf.name, i, err)
		}
	}
	if len(params) == 0 {
		return []*Run[Out]{}, c.ready(ctx)
	}
	var out []store.Inserted
	if db == nil {
		expected := make([]bool, len(news)) // before the commit: see notices.expect
		for i, r := range news {
			expected[i] = c.notices.expect(r.ID)
		}
		out, err = c.insertRetrying(ctx, func(ctx context.Context) ([]store.Inserted, error) {
			return c.store.InsertRuns(ctx, c.store.Pool(), news)
		})
		for i, r := range news {
			if expected[i] && (err != nil || i >= len(out) || !out[i].Created || out[i].ID != r.ID) {
				c.notices.unexpect(r.ID)
			}
		}
	} else {
		out, err = c.store.InsertRuns(ctx, db, news)
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", wf.name, err)
	}
	queues := map[string]bool{}
	for _, r := range news {
		if !queues[r.Queue] {
			queues[r.Queue] = true
			c.warnIfUnserved(ctx, wf.name, r.Queue)
		}
	}
	runs = make([]*Run[Out], len(params))
	for i, ins := range out {
		runs[i], errs[i] = handle[Out](c, wf.name, news[i].Key, ins)
	}
	return runs, errors.Join(errs...)
}
