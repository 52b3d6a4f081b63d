package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// A failed transactional attempt is classified (its error, or a lost
// connection) from what was seen before its transaction was rolled back:
// the rollback hands the connection back to the pool, where other runs and
// the claim loop use it at once. Run it with -race.
func TestTx_AFailedAttemptDoesNotTouchItsConnectionOnceReturned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	act := activities.NewTx("fail-tx", func(ctx context.Context, tx pgx.Tx, x in) (int, error) {
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
			return 0, err
		}
		return 0, errors.New("refused")
	}, policy.MaxAttempts(3), policy.Constant(time.Millisecond), policy.Jitter(policy.NoJitter))
	wf := oneStep(act)
	e.worker(e.config(), wf)
	var runs []*sdk.Run[int]
	for range 8 {
		run, err := sdk.Start(e.ctx, e.client, wf, in{})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	for _, run := range runs {
		_, err := result(t, run)
		var re *sdk.RunError
		if !errors.As(err, &re) || re.Reason != sdk.ReasonRetriesExhausted {
			t.Fatalf("run %s: %v, want retries_exhausted (a refusal, not a lost connection)", run.ID, err)
		}
	}
}
