package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/sdk"
)

// A worker makes the coming days' partitions of steps and attempts when it
// starts (migration 22's function, hourly after that); one that cannot (a
// lock it waited 100 ms for) says so in its log, once, in words an on-call
// engineer can act on, goes on running runs, and makes them within seconds
// of the lock's release.
func TestWorker_MakesTheComingDaysPartitionsAndSaysWhenItCannot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	day := time.Now().UTC().AddDate(0, 0, 2).Format("20060102")
	e.exec(`DROP TABLE {schema}.steps_` + day + `, {schema}.attempts_` + day)
	first := &logBuffer{}
	fcfg := e.config()
	fcfg.Logger = first.logger()
	// The call can take longer than the default 5 s on a loaded machine
	// (CI: every try timed out for a minute): a try is given 20 s (below
	// the lease, as the configuration requires).
	fcfg.StatementTimeout, fcfg.LeaseTTL = 20*time.Second, 30*time.Second
	e.worker(fcfg, echoWorkflow)
	defer func() {
		if t.Failed() {
			t.Logf("first worker's log:\n%s", first.String())
		}
	}()
	// Under a loaded machine a try can pass its StatementTimeout (seen in
	// CI: three tries of 5 s): the worker tries again within seconds, and
	// the test waits a minute.
	within(t, time.Minute, "the day after tomorrow's partitions made again", func() bool {
		return q[int](e, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE c.relnamespace = $1::regnamespace AND c.relname IN ('steps_`+day+`', 'attempts_`+day+`')`, e.schema) == 2
	})

	// A session holds the DEFAULT partition of steps: the function waits
	// 100 ms for it, gives up, and the worker logs why.
	e.exec(`DROP TABLE {schema}.steps_` + day + `, {schema}.attempts_` + day)
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(e.ctx)) }()
	if _, err := tx.Exec(e.ctx, `LOCK TABLE `+pgx.Identifier{e.schema, "steps_default"}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	cfg := e.config()
	cfg.Label, cfg.Logger = "blocked", logs.logger()
	cfg.StatementTimeout, cfg.LeaseTTL = 20*time.Second, 30*time.Second
	e.worker(cfg, echoWorkflow)
	eventually(t, "the blocked worker's warning", func() bool {
		return strings.Contains(logs.String(), "could not make the coming days' partitions of steps and attempts")
	})
	if l := logs.String(); !strings.Contains(l, "ensure_history_partitions") || !strings.Contains(l, "lock timeout") {
		t.Errorf("the warning does not say what failed and how to make them by hand:\n%s", l)
	}
	_ = tx.Rollback(e.ctx)
	// The blocked worker tries again within seconds of the lock's release,
	// not a minute later, and says it succeeded (the partitions may be the
	// first worker's, if it was still trying then).
	within(t, time.Minute, "the blocked worker's success after its failed tries", func() bool {
		return strings.Contains(logs.String(), "after failed tries")
	})
	if n := q[int](e, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE c.relnamespace = $1::regnamespace AND c.relname IN ('steps_`+day+`', 'attempts_`+day+`')`, e.schema); n != 2 {
		t.Errorf("%d of the day's two partitions after the blocked worker's success", n)
	}
	if l := logs.String(); strings.Count(l, "could not make the coming days' partitions") != 1 {
		t.Errorf("the blocked worker should warn once:\n%s", l)
	}
	// Runs go on (their rows' day has its partition).
	r, err := sdk.Start(e.ctx, e.client, echoWorkflow, in{N: 7})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, r); err != nil || out != 7 {
		t.Fatalf("a run after the warning: %d, %v", out, err)
	}
}

// Retention while workers run removes nothing of an unfinished run: 20 runs
// of five days ago (by their IDs) run three steps each on a worker while
// retention drops their day again and again (expired runs of that day are
// added before each pass), each drop moving the open runs' histories to
// the day's new partition under the lock that holds their workers' writes.
// Every run completes with each step run once and recorded once.
func TestRetention_WhileWorkersRunRemovesNothingOfAnUnfinishedRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := storetest.Backdate(e.ctx, e.pool, e.schema, 10); err != nil {
		t.Fatal(err)
	}
	var calls sync.Map // "run/step" -> *atomic.Int32
	step := activities.New("old-step", func(ctx context.Context, x in) (int, error) {
		info, _ := activities.InfoFrom(ctx)
		v, _ := calls.LoadOrStore(fmt.Sprintf("%s/%d", info.RunID, x.N), new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
		time.Sleep(60 * time.Millisecond)
		return x.N, nil
	})
	wf := sdk.NewWorkflow("old-runs", func(ctx context.Context, x in) (int, error) {
		sum := 0
		for i := 1; i <= 3; i++ {
			n, err := sdk.Execute(ctx, step, in{N: i})
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	})
	const runs = 20
	e.exec(strings.ReplaceAll(`INSERT INTO {schema}.runs (id, workflow, input, created_at)
		SELECT `+storetest.DayID(5, "open")+`, 'old-runs', '{"N": 0}', now() - interval '5 days' FROM generate_series(1, 20) AS i`, "{schema}", e.schema))
	if err := e.store.SetRetention(e.ctx, store.HistoryRetention{Completed: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.Concurrency = 4 // the runs take a while: drops happen between their steps
	e.worker(cfg, wf)
	passes := 0
	giveUp := time.Now().Add(2 * time.Minute) // fail this test, not the package's timeout, on a machine too loaded
	for batch := 0; q[int](e, `SELECT count(*) FROM {schema}.runs WHERE workflow = 'old-runs' AND status <> 'completed'`) > 0; batch++ {
		if batch > 2000 || time.Now().After(giveUp) {
			t.Fatalf("the runs did not complete in %d passes", batch)
		}
		// Expired runs of the same day, so that the pass drops it again:
		// five new IDs a batch (a tag per batch drew them from a hash, and
		// two batches' IDs met once in CI, a pass having left the earlier
		// batch's runs).
		e.exec(strings.ReplaceAll(`INSERT INTO {schema}.runs (id, workflow, input, status, epoch, created_at, finished_at)
			SELECT `+storetest.DayID(5, "gone")+`, 'gone', '{}', 'completed', 1, now() - interval '5 days', now() - interval '5 days'
			FROM generate_series(`+fmt.Sprint(5*batch+1)+`, `+fmt.Sprint(5*batch+5)+`) AS i`, "{schema}", e.schema))
		if err := e.store.RetainHistory(e.ctx, "test", ""); err != nil {
			t.Fatal(err)
		}
		passes++
	}
	drops := q[int](e, `SELECT count(*) FROM {schema}.history_drops WHERE state = 'done'`)
	// (A pass whose lock is not free within 100 ms drops nothing, and
	// passes also merge the old partitions: on a loaded machine some of
	// the passes drop nothing.)
	if drops < 3 {
		t.Fatalf("%d drops in %d passes while the runs ran, want at least 3", drops, passes)
	}
	t.Logf("%d drops in %d passes while the runs ran", drops, passes)
	if got := q[string](e, `SELECT count(*) FILTER (WHERE output = '6') || ' ' || count(*) FROM {schema}.runs WHERE workflow = 'old-runs'`); got != fmt.Sprintf("%d %d", runs, runs) {
		t.Fatalf("old runs completed with output 6 / all: %s", got)
	}
	if got := q[string](e, `SELECT count(*) || ' ' || count(*) FILTER (WHERE s.status = 'completed') FROM {schema}.steps s
		JOIN {schema}.runs r ON r.id = s.run_id WHERE r.workflow = 'old-runs'`); got != fmt.Sprintf("%d %d", 3*runs, 3*runs) {
		t.Fatalf("steps of the old runs (all, completed): %s, want %d each", got, 3*runs)
	}
	if got := q[int](e, `SELECT count(*) FROM {schema}.attempts a JOIN {schema}.runs r ON r.id = a.run_id
		WHERE r.workflow = 'old-runs' AND a.status = 'succeeded'`); got != 3*runs {
		t.Fatalf("%d succeeded attempts of the old runs, want %d", got, 3*runs)
	}
	n := 0
	calls.Range(func(k, v any) bool {
		n++
		if c := v.(*atomic.Int32).Load(); c != 1 {
			t.Errorf("step %v ran %d times", k, c)
		}
		return true
	})
	if n != 3*runs {
		t.Errorf("%d steps ran, want %d", n, 3*runs)
	}
	t.Logf("%d passes, %d drops while %d runs ran", passes, drops, runs)
}

// within is eventually with a deadline of its own.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
