package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// 1.5 s after the worker stopped waiting (its StatementTimeout, 1 s:
	// long enough that nothing else the worker sends outlives it on a
	// loaded machine).
	if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`
		CREATE TABLE %[1]s.orders (n int);
		CREATE FUNCTION %[1]s.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE
			done timestamptz := clock_timestamp() + interval '2.5 seconds';
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
	cfg.StatementTimeout = time.Second
	w := e.worker(cfg, wf)
	run, err := sdk.Start(e.ctx, e.client, wf, in{N: 7})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, run); err != nil || out != 7 {
		t.Fatalf("Result = %d, %v; attempts %v", out, err, e.statuses(run.ID))
	}
	// One attempt, succeeded. (On a machine loaded enough that the
	// checkpoint's statement itself outlives StatementTimeout, attempts
	// interrupted by that, with nothing committed, may come first.)
	got := attemptOutcomes(e.statuses(run.ID))
	if n := len(got); n == 0 || got[n-1] != "succeeded" || slices.ContainsFunc(got[:n-1], func(o string) bool { return o != "interrupted" }) {
		t.Fatalf("attempts = %v, want the one that committed, last and alone but for interrupted ones", e.statuses(run.ID))
	}
	if n := scalar[int](e, fmt.Sprintf(`SELECT count(*) FROM %s.orders`, e.schema)); n != 1 || int(calls.Load()) != len(got) {
		t.Fatalf("%d order rows, %d calls for %d attempts: want the one committed call", n, calls.Load(), len(got))
	}
	if n := w.Stats().LeasesLost; n != 0 {
		t.Fatalf("%d leases lost: the worker took its own step's commit for another's", n)
	}
	// Only an interrupted attempt hands the run back: the one that
	// committed was known to have, not taken for a rollback and handed
	// back (the step found completed by the next claim).
	if n, interrupted := w.Stats().Released, int64(len(got)-1); n != interrupted {
		t.Fatalf("%d hand-backs for %d interrupted attempts: the COMMIT was taken for a rollback", n, interrupted)
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
	// The first order's COMMIT waits in a deferred trigger until pgx's
	// cancel request, sent when the worker stops waiting, ends it: the
	// transaction rolls back.
	slowCommits(t, e, "NEW.n = 1")
	var calls atomic.Int32
	record := activities.NewTx("record-order", func(ctx context.Context, tx pgx.Tx, x in) (int, error) {
		n := calls.Add(1)
		_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.orders VALUES ($1)`, e.schema), n)
		return int(n), err
	}, policy.MaxAttempts(1))
	wf := oneStep(record)
	cfg := e.config()
	cfg.StatementTimeout = time.Second
	e.worker(cfg, wf)
	run, err := sdk.Start(e.ctx, e.client, wf, in{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := result(t, run)
	if err != nil || out != int(calls.Load()) {
		t.Fatalf("Result = %d, %v; attempts %v", out, err, e.statuses(run.ID))
	}
	// [interrupted succeeded] (more interrupted ones on a machine loaded
	// enough that a checkpoint outlives StatementTimeout).
	got := attemptOutcomes(e.statuses(run.ID))
	if n := len(got); n < 2 || got[0] != "interrupted" || got[n-1] != "succeeded" ||
		slices.ContainsFunc(got[:n-1], func(o string) bool { return o != "interrupted" }) {
		t.Fatalf("attempts = %v, want the unanswered one interrupted, then the success", e.statuses(run.ID))
	}
	if n := scalar[int](e, fmt.Sprintf(`SELECT count(*) FROM %s.orders`, e.schema)); n != 1 {
		t.Fatalf("%d order rows, want the last call's only", n)
	}
}

// A transactional step whose COMMIT is slower than StatementTimeout every
// time (the activity's own deferred work, say) is not handed back forever:
// an unanswered COMMIT right after an interrupted attempt is charged, so
// its budget ends the step.
func TestTx_ACommitAlwaysTooSlowStillEndsTheStepsBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slowCommits(t, e, "true")
	record := activities.NewTx("record-order", func(ctx context.Context, tx pgx.Tx, x in) (int, error) {
		_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.orders VALUES (1)`, e.schema))
		return 1, err
	}, policy.MaxAttempts(2), policy.Constant(10*time.Millisecond), policy.Jitter(policy.NoJitter))
	wf := oneStep(record)
	cfg := e.config()
	cfg.StatementTimeout = time.Second
	e.worker(cfg, wf)
	run, err := sdk.Start(e.ctx, e.client, wf, in{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = result(t, run)
	var re *sdk.RunError
	if !errors.As(err, &re) || re.Reason != sdk.ReasonRetriesExhausted {
		t.Fatalf("Result error = %v, want retries_exhausted; attempts %v", err, e.statuses(run.ID))
	}
	// [interrupted failed interrupted failed]: never two interrupted in a
	// row, and the two errors of MaxAttempts charged.
	got := attemptOutcomes(e.statuses(run.ID))
	failed := 0
	for i, o := range got {
		switch {
		case o == "failed":
			failed++
		case o != "interrupted" || i > 0 && got[i-1] == "interrupted":
			t.Fatalf("attempts = %v, want interrupted and failed ones, never two interrupted in a row", e.statuses(run.ID))
		}
	}
	if failed != 2 || got[len(got)-1] != "failed" {
		t.Fatalf("attempts = %v, want the last of two failed to end the step", e.statuses(run.ID))
	}
	if n := scalar[int](e, fmt.Sprintf(`SELECT count(*) FROM %s.orders`, e.schema)); n != 0 {
		t.Fatalf("%d order rows, want none committed", n)
	}
}

// slowCommits creates the table orders (n int) whose rows matching when
// make their transaction's COMMIT wait, in a deferred trigger, until a
// cancel request ends it (rolled back; at most 30 s, then it fails on its
// own).
func slowCommits(t *testing.T, e *env, when string) {
	t.Helper()
	if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`
		CREATE TABLE %[1]s.orders (n int);
		CREATE FUNCTION %[1]s.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE
			done timestamptz := clock_timestamp() + interval '30 seconds';
		BEGIN
			WHILE clock_timestamp() < done LOOP
				PERFORM pg_sleep(0.05);
			END LOOP;
			RAISE EXCEPTION 'no cancel request came';
		END $$;
		CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON %[1]s.orders
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (%[2]s) EXECUTE FUNCTION %[1]s.slow_commit()`, e.schema, when)); err != nil {
		t.Fatal(err)
	}
}

// attemptOutcomes are the statuses of attempts listed "step.attempt:status".
func attemptOutcomes(attempts []string) []string {
	out := make([]string, len(attempts))
	for i, a := range attempts {
		_, out[i], _ = strings.Cut(a, ":")
	}
	return out
}
