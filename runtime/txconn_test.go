package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
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

// A transactional step's COMMIT that outlives the worker's wait for it (the
// server slow to commit, the worker's process paused) is not taken for a
// rollback: the worker learns the step's outcome only once that COMMIT is
// over. It read the step's record at once, found it still running (the
// COMMIT not yet visible), retried the step, and the retry's start, after
// the COMMIT landed, recorded a second attempt on a completed step (the
// chaos test saw it as "completed with 1 succeeded attempts, last
// succeeded: false").
func TestTx_ACommitThatOutlivesItsWaitIsNotTakenForARollback(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The COMMIT runs a deferred trigger that sleeps: the server commits
	// a second after the worker stopped waiting (its StatementTimeout).
	if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`
		CREATE TABLE %[1]s.orders (n int);
		CREATE FUNCTION %[1]s.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE
			done timestamptz := clock_timestamp() + interval '1 second';
		BEGIN
			LOOP
				BEGIN
					PERFORM pg_sleep(greatest(extract(epoch FROM done - clock_timestamp()), 0));
					RETURN NULL;
				EXCEPTION WHEN query_canceled THEN
					-- pgx's cancel request, once the worker stopped
					-- waiting: this COMMIT is past it (as one whose WAL
					-- flush is under way is), and goes on
				END;
			END LOOP;
		END $$;
		CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON %[1]s.orders
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION %[1]s.slow_commit()`, e.schema)); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	record := activities.NewTx("record-order", func(ctx context.Context, tx pgx.Tx, x in) (int, error) {
		calls.Add(1)
		_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.orders VALUES ($1)`, e.schema), x.N)
		return x.N, err
	}, policy.MaxAttempts(3), policy.Constant(10*time.Millisecond), policy.Jitter(policy.NoJitter))
	wf := oneStep(record)
	cfg := e.config()
	cfg.StatementTimeout = 300 * time.Millisecond
	w := e.worker(cfg, wf)
	run, err := sdk.Start(e.ctx, e.client, wf, in{N: 7})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, run); err != nil || out != 7 {
		t.Fatalf("Result = %d, %v; attempts %v", out, err, e.statuses(run.ID))
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:succeeded"}) {
		t.Fatalf("attempts = %v, want the one that committed", got)
	}
	if n := scalar[int](e, fmt.Sprintf(`SELECT count(*) FROM %s.orders`, e.schema)); n != 1 || calls.Load() != 1 {
		t.Fatalf("%d order rows, %d calls: want the one committed call", n, calls.Load())
	}
	if n := w.Stats().LeasesLost; n != 0 {
		t.Fatalf("%d leases lost: the worker took its own step's commit for another's", n)
	}
}

// A transactional step whose checkpoint the database does not commit within
// StatementTimeout (a server slow to commit: I/O, a synchronous standby
// behind) rolls back, and that is the database's fault, not the
// activity's: the attempt is recorded interrupted and charged to no budget,
// as one whose connection was lost. It was charged as the activity's error:
// with MaxAttempts 1, the run failed retries_exhausted.
func TestTx_ACommitTheDatabaseIsTooSlowForIsChargedToNoBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The first order's COMMIT sleeps in a deferred trigger until pgx's
	// cancel request, sent when the worker stops waiting, ends it: the
	// transaction rolls back.
	if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`
		CREATE TABLE %[1]s.orders (n int);
		CREATE FUNCTION %[1]s.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN PERFORM pg_sleep(10); RETURN NULL; END $$;
		CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON %[1]s.orders
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.n = 1) EXECUTE FUNCTION %[1]s.slow_commit()`, e.schema)); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	record := activities.NewTx("record-order", func(ctx context.Context, tx pgx.Tx, x in) (int, error) {
		n := calls.Add(1)
		_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.orders VALUES ($1)`, e.schema), n)
		return int(n), err
	}, policy.MaxAttempts(1))
	wf := oneStep(record)
	cfg := e.config()
	cfg.StatementTimeout = 300 * time.Millisecond
	e.worker(cfg, wf)
	run, err := sdk.Start(e.ctx, e.client, wf, in{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, run); err != nil || out != 2 {
		t.Fatalf("Result = %d, %v; attempts %v", out, err, e.statuses(run.ID))
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:interrupted", "1.2:succeeded"}) {
		t.Fatalf("attempts = %v, want the unanswered one interrupted", got)
	}
	if n := scalar[int](e, fmt.Sprintf(`SELECT count(*) FROM %s.orders`, e.schema)); n != 1 {
		t.Fatalf("%d order rows, want the second call's only", n)
	}
}
