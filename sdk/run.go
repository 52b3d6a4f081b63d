package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/store"
)

// Run is a handle on one run, typed by its workflow's output.
type Run[Out any] struct {
	// ID is the run's ID: stable for its whole life, across retries and requeues.
	ID uuid.UUID
	// Created is false when Start found an existing run with the same key.
	Created bool

	client   *Client
	workflow string
}

// Lookup returns a handle on an existing run of wf, e.g. to wait for its
// result in another process. It fails when the run does not exist or belongs
// to another workflow.
func Lookup[In, Out any](ctx context.Context, c *Client, wf *Workflow[In, Out], id uuid.UUID) (*Run[Out], error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	r, err := c.store.GetRun(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.Workflow != wf.name {
		return nil, fmt.Errorf("run %s is a run of %q, not %q: %w", id, r.Workflow, wf.name, ErrUnknownWorkflow)
	}
	return &Run[Out]{ID: id, client: c, workflow: wf.name}, nil
}

// Result waits until the run ends and returns its output, or a *RunError with
// the failure reason (errors.Is(err, ErrIndeterminate) for an indeterminate
// run), or ErrCancelled. It wakes on the run's completion notice
// (LISTEN/NOTIFY) and re-reads the run at the client's poll interval in case
// a notice is missed. It returns ctx's error when ctx ends first.
func (r *Run[Out]) Result(ctx context.Context) (Out, error) {
	var out Out
	row, err := r.client.wait(ctx, r.ID)
	if err != nil {
		return out, err
	}
	switch row.Status {
	case "completed":
		if err := json.Unmarshal(row.Output, &out); err != nil {
			return out, fmt.Errorf("run %s: decode output: %w", r.ID, err)
		}
		return out, nil
	case "cancelled":
		return out, fmt.Errorf("run %s: %w", r.ID, ErrCancelled)
	}
	re := &RunError{RunID: row.ID, Workflow: row.Workflow, Reason: ReasonWorkflowError, Message: row.ErrorMessage}
	if f := row.Failure; f != nil {
		re.Reason, re.Step, re.Activity, re.Message, re.Type = f.Reason, f.Step, f.Activity, f.ErrorMessage, f.ErrorType
	}
	return out, re
}

func terminal(status string) bool {
	return status == "completed" || status == "failed" || status == "cancelled"
}

// wait blocks until run id is terminal. It listens on the done channel on a
// connection of its own; if that cannot be had it polls only.
func (c *Client) wait(ctx context.Context, id uuid.UUID) (store.Run, error) {
	if err := c.ready(ctx); err != nil {
		return store.Run{}, err
	}
	conn := c.listen(ctx)
	if conn != nil {
		defer func() {
			// Leave no LISTEN behind on a pooled connection.
			cleanup, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := conn.Exec(cleanup, "UNLISTEN *"); err != nil {
				conn.Conn().Close(cleanup)
			}
			conn.Release()
		}()
	}
	for {
		row, err := c.store.GetRun(ctx, id)
		if err != nil {
			return store.Run{}, err
		}
		if terminal(row.Status) {
			return row, nil
		}
		if err := c.sleep(ctx, conn, id); err != nil {
			return store.Run{}, err
		}
	}
}

// listen returns a pooled connection listening on the done channel, or nil
// when none can be had (then Result polls).
func (c *Client) listen(ctx context.Context) *pgxpool.Conn {
	conn, err := c.store.Pool().Acquire(ctx)
	if err != nil {
		return nil
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{c.store.DoneChannel()}.Sanitize()); err != nil {
		conn.Release()
		return nil
	}
	return conn
}

// sleep waits for the run's completion notice or the poll interval,
// whichever comes first; notices of other runs are skipped without a query.
func (c *Client) sleep(ctx context.Context, conn *pgxpool.Conn, id uuid.UUID) error {
	waitCtx, cancel := context.WithTimeout(ctx, c.poll)
	defer cancel()
	want := id.String()
	for conn != nil {
		n, err := conn.Conn().WaitForNotification(waitCtx)
		if err != nil {
			break // the poll interval passed, or the connection broke: re-read the run
		}
		if n.Payload == want {
			return ctx.Err()
		}
	}
	<-waitCtx.Done()
	return ctx.Err()
}
