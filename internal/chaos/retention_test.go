package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/chaos/workload"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/internal/storetest"
)

// A worker process's retention pass (the procedure retain_history, run by
// the worker's database session) is SIGKILLed in the middle of a drop: its
// backend process is killed once the day's partitions are detached, while
// it deletes the runs that went with them, once a batch of them is gone. PostgreSQL crashes every session
// and recovers, as after any backend killed that way. Workflow runs of
// today are in flight in the meantime. Then:
//
//   - the schema is consistent: the ledger has the drop open ('detached'),
//     no attached partition holds a step of the day, some runs of the day
//     are deleted and the others there, and the worker logs the failed
//     pass with what to do;
//   - the next pass (a second worker process's, at its start) finishes the
//     job: one audit row, the drop 'done' with every run of the day
//     deleted, no table of the day left;
//   - the runs in flight all complete, and the invariants hold.
//
// Not parallel: a CI run once hung its first poll of the ledger (a write to
// the private cluster's socket blocked for 6 minutes) while the package's
// other scenarios ran beside it; every wait here is bounded too.
func TestRetention_ASIGKILLMidDropLeavesAConsistentSchemaTheNextPassFinishes(t *testing.T) {
	cluster := privateCluster(t) // the kill crashes the server's every session
	e := newEnvOn(t, cluster.URL(), "public")
	// Every statement of the test ends within 4 minutes (it takes well under
	// one): a read or write that blocks fails it, with its place, instead of
	// running into the package's timeout (once seen in CI, before the kill).
	ctx, cancel := context.WithTimeout(e.ctx, 4*time.Minute)
	defer cancel()
	e.ctx = ctx
	// Commits durable, as in production: the crash loses none of the pass's.
	if _, err := e.pool.Exec(e.ctx, `ALTER SYSTEM SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Restart(); err != nil {
		t.Fatal(err)
	}
	e.eventually("the server back with synchronous_commit on", func() (bool, error) {
		s, err := query[string](e, `SHOW synchronous_commit`)
		return s == "on", err
	})
	if err := storetest.Backdate(e.ctx, e.pool, e.schema, 10); err != nil {
		t.Fatal(err)
	}
	day := time.Now().UTC().AddDate(0, 0, -5).Format("20060102")
	const runs = 60_000 // six batches of deletions: seconds to kill it in
	for _, sql := range []string{
		`INSERT INTO {schema}.runs (id, workflow, input, status, epoch, created_at, finished_at)
		SELECT ` + storetest.DayID(5, "done") + `, 'w', '{}', 'completed', 1, now() - interval '5 days', now() - interval '5 days'
		FROM generate_series(1, 60000) AS i`,
		`INSERT INTO {schema}.steps (run_id, step, activity, status, policy, finished_at)
		SELECT id, 1, 'a', 'completed', '{}', now() FROM {schema}.runs`,
		`INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, ended_at, epoch, worker)
		SELECT id, 1, 1, 'a', 'succeeded', now(), 1, 'w' FROM {schema}.runs`,
	} {
		if _, err := e.pool.Exec(e.ctx, strings.ReplaceAll(sql, "{schema}", e.schema)); err != nil {
			t.Fatal(err)
		}
	}
	var ids []uuid.UUID
	for range 20 {
		ids = append(ids, e.start(workload.Step{Kind: workload.AtLeastOnce, SleepMS: 200},
			workload.Step{Kind: workload.AtMostOnce, SleepMS: 300, Reconcile: true}, workload.Step{Kind: workload.AtLeastOnce, SleepMS: 100}))
	}
	if err := e.store.SetRetention(e.ctx, store.HistoryRetention{Completed: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}

	// The first worker's start runs a pass: kill its backend mid-drop.
	first := e.worker("retain-1")
	var backend int
	giveUp := time.Now().Add(waitFor)
	for deleted := int64(0); deleted == 0; { // its tables detached, a batch of its runs deleted
		var state string
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		err := e.pool.QueryRow(ctx, `SELECT coalesce(max(state), ''), coalesce(max(runs_deleted), 0) FROM history_drops`).Scan(&state, &deleted)
		cancel()
		if state == "done" {
			t.Fatal("the drop was done before it could be killed: make the day bigger")
		}
		if time.Now().After(giveUp) {
			t.Fatalf("no batch of the drop deleted within %s (last read: %q, %v)", waitFor, state, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := e.pool.QueryRow(e.ctx, `SELECT pid FROM pg_stat_activity WHERE query LIKE 'CALL %retain_history%' AND state = 'active'`).Scan(&backend); err != nil {
		t.Fatalf("the pass's backend: %v", err)
	}
	if err := syscall.Kill(backend, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL of backend %d: %v", backend, err)
	}
	e.eventually("the worker to log its failed pass", func() (bool, error) {
		return first.Count("the retention pass failed") > 0, nil
	})

	// Consistent after the crash. The pool's connections died with every
	// session: they are closed first, then the server is waited for.
	e.eventually("the server back", func() (bool, error) {
		e.pool.Reset()
		_, err := query[int](e, `SELECT 1`)
		return true, err
	})
	if n := mustQuery[int64](e, `SELECT count(*) FROM {schema}.steps WHERE run_id >= {schema}._history_bound(now() - interval '6 days')
		AND run_id < {schema}._history_bound(now() - interval '3 days')`); n != 0 {
		t.Errorf("%d steps of the day still attached after the kill", n)
	}
	if got := mustQuery[string](e, `SELECT string_agg(state, ',') FROM {schema}.history_drops`); got != "detached" {
		t.Errorf("ledger after the kill: %q, want detached", got)
	}
	if n := mustQuery[int64](e, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'retention' AND filter->>'change' = 'drop'`); n != 0 {
		t.Errorf("%d audit rows of drops before the drop is done", n)
	}
	left := mustQuery[int64](e, `SELECT count(*) FROM {schema}.runs WHERE workflow = 'w'`)
	if left == 0 || left == runs {
		t.Errorf("%d of the day's %d runs left after the kill, want some deleted and some not", left, runs)
	}
	t.Logf("killed backend %d with %d of %d runs of the day left to delete", backend, left, runs)

	// The next pass: a second worker process's start.
	e.worker("retain-2")
	e.eventually("the next pass to finish the drop", func() (bool, error) {
		s, err := query[string](e, `SELECT string_agg(state, ',') FROM {schema}.history_drops`)
		return s == "done", err
	})
	drops, err := e.store.HistoryDrops(e.ctx, 10)
	if err != nil || len(drops) != 1 || drops[0].RunsDeleted != runs || drops[0].Partition != day {
		t.Fatalf("ledger %+v, %v; want one drop of %s, %d runs", drops, err, day, runs)
	}
	if n := mustQuery[int64](e, `SELECT count(*) FROM {schema}.runs WHERE workflow = 'w'`); n != 0 {
		t.Errorf("%d runs of the day left", n)
	}
	if n := mustQuery[int64](e, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relname ~ '^(steps|attempts)_`+day+`'`, e.schema); n != 0 {
		t.Errorf("%d tables of the day left", n)
	}
	if n := mustQuery[int64](e, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'retention' AND filter->>'change' = 'drop'`); n != 1 {
		t.Errorf("%d audit rows of drops, want 1", n)
	}
	for _, id := range ids {
		e.completed(id)
	}
	stopGracefully(t, first)
	e.check()
}
