package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
)

// Run is a handle on one run, typed by its workflow's output.
type Run[Out any] struct {
	// ID is the run's ID: stable for its whole life, across retries and requeues.
	ID uuid.UUID
	// Created is false when Start found an existing run with the same key.
	Created bool

	client *Client
}

// errNoHandle is what Result returns on a Run that no Start or Lookup made.
var errNoHandle = errors.New("sdk: Run handle not made by Start or Lookup")

// Lookup returns a handle on an existing run of wf, e.g. to wait for its
// result in another process. It fails when the run does not exist or belongs
// to another workflow.
func Lookup[In, Out any](ctx context.Context, c *Client, wf *Workflow[In, Out], id uuid.UUID) (*Run[Out], error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	if wf == nil {
		return nil, fmt.Errorf("sdk.Lookup: nil workflow")
	}
	r, err := c.getRun(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.Workflow != wf.name {
		return nil, fmt.Errorf("run %s is a run of %q, not %q: %w", id, r.Workflow, wf.name, ErrWorkflowMismatch)
	}
	return &Run[Out]{ID: id, client: c}, nil
}

// Result waits until the run ends and returns its output, or a *RunError with
// the failure reason (errors.Is(err, ErrIndeterminate) for an indeterminate
// run), or ErrCancelled. It wakes on the run's completion notice
// (LISTEN/NOTIFY) and re-reads the run at the client's poll interval in case
// a notice is missed. It returns ctx's error when ctx ends first.
func (r *Run[Out]) Result(ctx context.Context) (Out, error) {
	var out Out
	if r == nil || r.client == nil {
		return out, errNoHandle
	}
	row, err := r.client.wait(ctx, r.ID)
	if err != nil {
		return out, err
	}
	switch row.Status {
	case record.RunCompleted:
		if err := json.Unmarshal(row.Output, &out); err != nil {
			return out, fmt.Errorf("run %s: decode output: %w", r.ID, err)
		}
		return out, nil
	case record.RunCancelled:
		return out, fmt.Errorf("run %s: %w", r.ID, ErrCancelled)
	}
	re := &RunError{RunID: row.ID, Workflow: row.Workflow, Reason: ReasonWorkflowError, Message: row.ErrorMessage}
	if f := row.Failure; f != nil {
		re.Reason, re.Step, re.Activity, re.Message, re.Type = f.Reason, f.Step, f.Activity, f.ErrorMessage, f.ErrorType
	}
	return out, re
}

// getRun reads run id with the statement deadline.
func (c *Client) getRun(ctx context.Context, id uuid.UUID) (store.Run, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	row, err := c.store.GetRun(ctx, id)
	return row, timedOut(ctx, err)
}

// wait blocks until run id is terminal. It wakes on the run's completion
// notice (see notices) and re-reads the run at the poll interval in case a
// notice is missed.
func (c *Client) wait(ctx context.Context, id uuid.UUID) (store.Run, error) {
	if err := c.ready(ctx); err != nil {
		return store.Run{}, err
	}
	var row store.Run
	err := c.await(ctx, id, 0, true, func() (bool, error) {
		var err error
		row, err = c.getRun(ctx, id)
		return err == nil && row.Status.Terminal(), err
	})
	return row, err
}

// await calls check until it reports done (or fails), again at each notice
// about run id on the done channel and at the client's poll interval, for
// up to timeout (0: until ctx ends). It returns ctx's error when ctx ends
// first, and errAwaitTimeout when the timeout passes. waitsForEnd says that
// check is done only once the run ended: then, for a run expected to notify
// its end (notices.expect), the first check waits for the notice.
func (c *Client) await(ctx context.Context, id uuid.UUID, timeout time.Duration, waitsForEnd bool, check func() (bool, error)) error {
	done, expected := c.notices.subscribe(c, id)
	defer c.notices.unsubscribe(id, done, c.listenIdle)
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	// A run this client created while the LISTEN in effect was, and not
	// notified since, has not ended: the first read would find it running.
	// Its first wait is short all the same (expectedWait), for a LISTEN
	// connection that died without an error yet.
	skip := expected && waitsForEnd
	for {
		next := c.poll
		if skip {
			skip, next = false, min(next, c.expectedWait)
		} else if ok, err := check(); ok || err != nil {
			return err
		}
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return errAwaitTimeout
			}
			next = min(next, left)
		}
		timer := time.NewTimer(next)
		select {
		case <-done:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// expectedWait is the default of Client.expectedWait, the bound of the wait
// for an expected run's notice before its first read: a run that ends sooner is read once, one that ends later twice,
// as any run was before the expectation.
const expectedWait = 500 * time.Millisecond

// errAwaitTimeout is await's timeout.
var errAwaitTimeout = errors.New("await: timed out")
