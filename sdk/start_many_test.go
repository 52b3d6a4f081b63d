package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/sdk"
)

var Other = sdk.NewWorkflow("other", func(ctx context.Context, in OrderIn) (string, error) { return in.ID, nil })

// StartMany validates every element as Start does; an invalid one fails the
// call and records nothing.
func TestStartMany_InvalidElementRecordsNothing(t *testing.T) {
	c, pool, schema := newClient(t, sdk.WithMaxPayload(64))
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		opts []sdk.StartOption
		in   OrderIn
		want string
		is   error
	}{
		{"empty queue", []sdk.StartOption{sdk.WithQueue("")}, OrderIn{}, "params[1]: empty queue name", nil},
		{"negative delay", []sdk.StartOption{sdk.WithDelay(-time.Second)}, OrderIn{}, "params[1]: negative delay", nil},
		{"payload limit", nil, OrderIn{ID: strings.Repeat("x", 100)}, "params[1]: input is", sdk.ErrPayloadTooLarge},
		{"empty fairness key", []sdk.StartOption{sdk.WithFairness("", 2)}, OrderIn{}, "params[1]: empty fairness key (weight 2)", nil},
		{"fairness weight 0", []sdk.StartOption{sdk.WithFairness("t", 0)}, OrderIn{}, `params[1]: fairness key "t": weight 0, want 1 to 1000000`, nil},
		{"long fairness key", []sdk.StartOption{sdk.WithFairnessKey(strings.Repeat("k", 201))}, OrderIn{},
			"params[1]: fairness key is 201 bytes, limit 200", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sdk.StartMany(ctx, c, Fulfil, []sdk.StartParams[OrderIn]{{}, {Input: tc.in, Options: tc.opts}})
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("StartMany: %v, want %q", err, tc.want)
			}
		})
	}
	if n := countRuns(t, pool, schema); n != 0 {
		t.Fatalf("%d runs, want 0", n)
	}
	runs, err := sdk.StartMany(ctx, c, Fulfil, nil)
	if err != nil || len(runs) != 0 {
		t.Fatalf("no params: %v, %v", runs, err)
	}
}

// A key naming a run of another workflow fails that element only: the other
// runs are recorded and returned.
func TestStartMany_KeyOfAnotherWorkflow(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	if _, err := sdk.Start(ctx, c, Other, OrderIn{}, sdk.WithKey("taken")); err != nil {
		t.Fatal(err)
	}
	runs, err := sdk.StartMany(ctx, c, Fulfil, []sdk.StartParams[OrderIn]{
		{Input: OrderIn{ID: "a"}},
		{Input: OrderIn{ID: "b"}, Options: []sdk.StartOption{sdk.WithKey("taken")}},
		{Input: OrderIn{ID: "c"}, Options: []sdk.StartOption{sdk.WithKey("free")}},
	})
	if !errors.Is(err, sdk.ErrWorkflowMismatch) || !strings.Contains(err.Error(), `key "taken"`) {
		t.Fatalf("StartMany: %v, want ErrWorkflowMismatch for key taken", err)
	}
	if len(runs) != 3 || runs[0] == nil || runs[1] != nil || runs[2] == nil || !runs[0].Created || !runs[2].Created {
		t.Fatalf("runs %v: want a and c created, b nil", runs)
	}
	if n := countRuns(t, pool, schema); n != 3 {
		t.Fatalf("%d runs, want 3", n)
	}
	// Start says the same for a single run.
	if _, err := sdk.Start(ctx, c, Fulfil, OrderIn{}, sdk.WithKey("taken")); !errors.Is(err, sdk.ErrWorkflowMismatch) {
		t.Fatalf("Start: %v, want ErrWorkflowMismatch", err)
	}
}

// StartManyTx records the runs only if the caller's transaction commits.
func TestStartManyTx_RunsExistIfTheTransactionCommits(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	params := []sdk.StartParams[OrderIn]{{Input: OrderIn{ID: "a"}}, {Input: OrderIn{ID: "b"}, Options: []sdk.StartOption{sdk.WithKey("b")}}}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := sdk.StartManyTx(ctx, c, tx, Fulfil, params); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if err == nil || countRuns(t, pool, schema) != 0 {
		t.Fatalf("after rollback: %v, %d runs", err, countRuns(t, pool, schema))
	}
	var runs []*sdk.Run[string]
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		runs, err = sdk.StartManyTx(ctx, c, tx, Fulfil, params)
		return err
	})
	if err != nil || len(runs) != 2 || countRuns(t, pool, schema) != 2 {
		t.Fatalf("after commit: %v, %v, %d runs", runs, err, countRuns(t, pool, schema))
	}
	for _, r := range runs {
		if _, err := sdk.Lookup(ctx, c, Fulfil, r.ID); err != nil {
			t.Fatal(err)
		}
	}
}
