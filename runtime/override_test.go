package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/override"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// A replacement given in the context of Start (the hook of package
// tenuretest) runs instead of the activity's function, under the activity's
// name and policy; a transactional activity's replacement gets the step's
// transaction, which commits with the checkpoint.
func TestOverride_RunsUnderTheActivitysNamePolicyAndTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	real := activities.New("fetch", func(ctx context.Context, n int) (int, error) {
		return 0, errors.New("the real function ran")
	}, policy.MaxAttempts(2), policy.Constant(time.Millisecond))
	record := activities.NewTx("record", func(ctx context.Context, tx pgx.Tx, n int) (int, error) {
		return 0, errors.New("the real function ran")
	})
	wf := sdk.NewWorkflow("override", func(ctx context.Context, n int) (int, error) {
		m, err := sdk.Execute(ctx, real, n)
		if err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, record, m)
	})

	calls := 0
	var txid string
	table := override.Table{
		"fetch": activities.New("fetch", func(ctx context.Context, n int) (int, error) {
			if calls++; calls == 1 {
				return 0, errors.New("flaky") // retried: the activity's MaxAttempts(2) applies
			}
			return n * 10, nil
		}),
		"record": activities.NewTx("record", func(ctx context.Context, tx pgx.Tx, n int) (int, error) {
			err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::xid::text").Scan(&txid)
			return n + 1, err
		}),
	}
	e.workerCtx(override.With(e.ctx, table), e.config(), wf)
	run, err := sdk.Start(e.ctx, e.client, wf, 4)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, run); err != nil || out != 41 {
		t.Fatalf("result %d, %v; want 41 from the replacements", out, err)
	}
	if got := fmt.Sprint(e.statuses(run.ID)); got != "[1.1:failed 1.2:succeeded 2.1:succeeded]" {
		t.Errorf("history %s", got)
	}
	checkpoint := scalar[string](e, fmt.Sprintf(`SELECT xmin::text FROM %s.steps WHERE run_id = $1 AND step = 2`, e.schema), run.ID)
	if checkpoint != txid {
		t.Errorf("the replacement ran in transaction %s, the checkpoint committed in %s", txid, checkpoint)
	}
}
