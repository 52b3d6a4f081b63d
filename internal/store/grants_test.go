package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/migrations"
)

// TestDocs_LeastPrivilegeRolesAreEnough applies the grants of
// docs/operations.md and checks that a worker role can do a worker's job
// (and no DDL, no deletes), that an operator can requeue and purge, and
// that a read-only role can look but not requeue.
//
// Upgraded, the same with the grants of a schema before version 11 (no
// wakes table), before version 21 (no schedule_backfills) and before
// version 22 (no ensure_history_partitions): migrations 11, 21 and 22 give
// each role what it needs on the new table or function from what it had on
// signals, on schedule_ticks, on flow_sweep, runs and attempts.
func TestDocs_LeastPrivilegeRolesAreEnough(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sql\n(-- Workers.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("no grants block in docs/operations.md")
	}
	t.Run("as documented", func(t *testing.T) { checkRoles(t, string(m[1]), false) })
	// Before version 11 the block named no wakes; before version 21, no
	// schedule_backfills; before version 29, no _flow_commit and _flow_sweep.
	before := regexp.MustCompile(`, tenure\.wakes(_id_seq)?`).ReplaceAllString(string(m[1]), "")
	before = regexp.MustCompile(`(?m)^GRANT [^\n]* ON tenure\.schedule_backfills TO [^\n]*\n`).ReplaceAllString(before, "")
	before = regexp.MustCompile(`(?m)^GRANT [^\n]* ON FUNCTION tenure\.ensure_history_partitions TO [^\n]*\n`).ReplaceAllString(before, "")
	before = regexp.MustCompile(`(?m)^GRANT [^\n]*(retain_history|_retention_|history_retention)[^\n]*\n`).ReplaceAllString(before, "")
	before = regexp.MustCompile(`, tenure\._flow_(commit|sweep)\b`).ReplaceAllString(before, "") // (migration 29's)
	if code := regexp.MustCompile(`--.*`).ReplaceAllString(before, ""); strings.Contains(code, "wakes") || strings.Contains(code, "schedule_backfills") ||
		strings.Contains(code, "ensure_history_partitions") || strings.Contains(code, "retention") || strings.Contains(code, "_flow_commit") ||
		strings.Contains(code, "_flow_sweep") {
		t.Fatalf("the grants without wakes, schedule_backfills and ensure_history_partitions still name them:\n%s", before)
	}
	t.Run("upgraded", func(t *testing.T) { checkRoles(t, before, true) })
}

// checkRoles applies grants (docs/operations.md's block) to three roles of
// a new schema and checks what each can do; with upgrade, it then runs the
// grants of migrations 11, 21 to 25 and 29, as upgrades from the versions
// before them do.
func checkRoles(t *testing.T, grants string, upgrade bool) {
	owner := newStore(t)
	suffix := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	roles := map[string]string{}
	for _, r := range []string{"tenure_worker", "tenure_operator", "tenure_readonly"} {
		roles[r] = r + "_" + suffix
		grants = strings.ReplaceAll(grants, r, roles[r])
	}
	ident := pgx.Identifier{owner.Schema()}.Sanitize()
	grants = strings.ReplaceAll(grants, "tenure.", ident+".")
	grants = strings.ReplaceAll(grants, "SCHEMA tenure ", "SCHEMA "+ident+" ")
	t.Cleanup(func() {
		for _, r := range roles {
			_, _ = owner.Pool().Exec(context.Background(), fmt.Sprintf("DROP OWNED BY %s; DROP ROLE IF EXISTS %s", r, r))
		}
	})
	if _, err := owner.Pool().Exec(t.Context(), grants); err != nil {
		t.Fatalf("the documented grants: %v", err)
	}
	for _, file := range []string{"0011_wakes.sql", "0021_schedule_sql.sql", "0022_history_partitions.sql", "0023_history_retention.sql", "0024_history_stats.sql", "0025_history_merge.sql", "0029_flow_fast.sql"} {
		if !upgrade {
			break
		}
		body, err := migrations.FS.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		do := string(body[strings.LastIndex(string(body), "DO $$"):]) // the grants' block, each migration's last
		if _, err := owner.Pool().Exec(t.Context(), strings.ReplaceAll(do, "{schema}", ident)); err != nil {
			t.Fatalf("the grants of %s: %v", file, err)
		}
	}
	as := func(role string) *store.Store {
		cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "SET ROLE "+role)
			return err
		}
		pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		st, err := store.New(pool, store.WithSchema(owner.Schema()))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	worker := as(roles["tenure_worker"])
	if err := worker.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	h := newHistory(t, worker) // start, claim, attempts, fail and complete, as the worker role
	failed := h.run(outcome{workflow: "wf", activity: "a", errors: 2, reason: "retries_exhausted"})
	h.run(outcome{workflow: "wf", activity: "a", errors: 1})
	if err := worker.RequeueRun(t.Context(), failed); err != nil {
		t.Fatalf("requeue as the worker role: %v", err)
	}
	for _, ddl := range []string{"CREATE TABLE {schema}.x (i int)", "DELETE FROM {schema}.runs", "DROP VIEW {schema}.open_failures"} {
		_, err := worker.Pool().Exec(t.Context(), replaceSchema(ddl, worker.Schema()))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" { // insufficient_privilege
			t.Errorf("worker role: %s: %v, want insufficient_privilege", ddl, err)
		}
	}

	// The durable primitives and the registry, as the worker role.
	if err := worker.Beat(t.Context(), worker.Pool(), store.WorkerBeat{Label: "w", Host: "h", PID: 1, Version: "v",
		Workflows: []string{"wf"}, Queues: []string{"default"}, Concurrency: 1, Interval: time.Second, TTL: time.Minute}); err != nil {
		t.Errorf("registry beat as the worker role: %v", err)
	}
	if err := worker.PruneWorkers(t.Context(), worker.Pool()); err != nil {
		t.Errorf("registry pruning as the worker role: %v", err)
	}
	// The hourly partitions' upkeep, as the worker role (the function makes
	// the tables with its owner's rights).
	if _, err := worker.EnsureHistoryPartitions(t.Context()); err != nil {
		t.Errorf("history partitions as the worker role: %v", err)
	}
	if _, err := worker.RetentionConfigured(t.Context()); err != nil {
		t.Errorf("reading the retention as the worker role: %v", err)
	}
	if err := worker.RetainHistory(t.Context(), "w", ""); err != nil {
		t.Errorf("retention as the worker role: %v", err)
	}
	l := claimN(t, worker, 1)[0]
	if _, err := worker.SendSignal(t.Context(), worker.Pool(), l.RunID, "go", []byte(`1`)); err != nil {
		t.Errorf("send a signal as the worker role: %v", err)
	}
	if _, err := worker.ApplyWakes(t.Context(), []uuid.UUID{l.RunID}); err != nil {
		t.Errorf("apply wakes as the worker role: %v", err)
	}
	for _, w := range []store.Write{
		{Lease: l, Receive: &store.SignalReceive{Step: 1, Name: "go"}},
		{Lease: l, SetEvent: &store.EventSet{Step: 2, Key: "k", Value: []byte(`1`)}},
		{Lease: l, StartChild: &store.ChildStart{Step: 3, ID: store.ChildID(l.RunID, 3), Workflow: "wf", Queue: "default", Input: []byte(`{}`)}},
		{Lease: l, Marks: []*store.StepMark{{Step: 4, Kind: store.KindSleep, Name: "sleep", Status: store.StepCompleted, Began: time.Now()},
			{Step: 5, Kind: store.KindPatch, Name: "a-patch", Status: store.StepCompleted}},
			Release: &store.Release{WaitFor: "child:" + store.ChildID(l.RunID, 3).String(), UntilStep: 3}},
	} {
		if res, err := worker.Commit(t.Context(), worker.Pool(), []store.Write{w}); err != nil || res[0].Err != nil {
			t.Errorf("a primitive's write as the worker role: %v %+v", err, res)
		}
	}

	h.run(outcome{workflow: "wf", activity: "b", errors: 1, reason: "non_retryable"})
	readonly := as(roles["tenure_readonly"])
	if _, err := readonly.RequeueFailures(t.Context(), store.RequeueFilter{Activity: "b"}, store.RequeueOptions{DryRun: true}); err != nil {
		t.Errorf("read-only dry run: %v", err)
	}
	if _, err := readonly.RequeueFailures(t.Context(), store.RequeueFilter{Activity: "b"}, store.RequeueOptions{}); err == nil {
		t.Error("the read-only role requeued")
	}
	if _, err := readonly.EnsureHistoryPartitions(t.Context()); err == nil {
		t.Error("the read-only role may make partitions (EXECUTE on ensure_history_partitions is not revoked from PUBLIC)")
	}

	operator := as(roles["tenure_operator"])
	if done, err := operator.RequeueFailures(t.Context(), store.RequeueFilter{Activity: "b"}, store.RequeueOptions{Note: "op"}); err != nil || len(done) != 1 {
		t.Errorf("operator requeue: %v, %v", done, err)
	}
	if _, err := operator.PurgeCompleted(t.Context(), store.PurgeOptions{OlderThan: time.Hour}); err != nil {
		t.Errorf("operator purge: %v", err)
	}
	if err := operator.SetRetention(t.Context(), store.HistoryRetention{Completed: 30 * 24 * time.Hour, Archive: true}); err != nil {
		t.Errorf("operator sets the retention: %v", err)
	}
	// A purge deletes the runs' steps and attempts too (migration 0008's
	// triggers, which run with the owner's rights), with the operator's
	// grant on runs alone.
	purged := h.run(outcome{workflow: "wf", activity: "c", errors: 1, reason: "non_retryable"})
	if p, err := operator.PurgeFailures(t.Context(), store.PurgeOptions{}); err != nil || p.Runs == 0 {
		t.Errorf("operator purge of failures: %+v, %v", p, err)
	}
	if n := scalar[int](t, owner, `SELECT (SELECT count(*) FROM {schema}.steps WHERE run_id = $1) + (SELECT count(*) FROM {schema}.attempts WHERE run_id = $1)`, purged); n != 0 {
		t.Errorf("the operator's purge left %d step and attempt rows of the purged run", n)
	}
	if _, err := operator.SendSignal(t.Context(), operator.Pool(), l.RunID, "go", []byte(`2`)); err != nil {
		t.Errorf("send a signal as the operator role: %v", err)
	}
	if _, err := operator.CancelRun(t.Context(), l.RunID); err != nil {
		t.Errorf("cancel as the operator role: %v", err)
	}
	// tenure runs start and runs delete, as the operator role.
	started := store.NewRun{ID: uuid.New(), Workflow: "wf", Queue: "default", Input: []byte(`{}`)}
	if _, err := operator.InsertRuns(t.Context(), operator.Pool(), []store.NewRun{started}); err != nil {
		t.Errorf("start a run as the operator role: %v", err)
	}
	done := h.run(outcome{workflow: "wf", activity: "d"})
	if _, err := operator.DeleteRun(t.Context(), done, "op"); err != nil {
		t.Errorf("delete a finished run as the operator role: %v", err)
	}
	if r, err := readonly.GetRun(t.Context(), l.RunID); err != nil || r.CancelRequested == nil {
		t.Errorf("a run whose cancel is a wake, read by the read-only role: %+v, %v", r, err)
	}
	if audit, err := operator.AuditLog(t.Context(), 0); err != nil || len(audit) != 6 || audit[5].Actor != roles["tenure_worker"] || audit[0].Action != "delete" {
		t.Errorf("audit as seen by the operator: %+v, %v", audit, err)
	}
	checkFlowRoles(t, worker, operator, readonly)
	// Schedules: a worker declares one and decides its ticks, an operator
	// pauses, resumes and triggers it, the read-only role cannot.
	if err := worker.DeclareSchedules(t.Context(), []store.ScheduleDecl{{Name: "nightly", Spec: "@daily", Workflow: "wf"}}, "w"); err != nil {
		t.Errorf("declare a schedule as the worker role: %v", err)
	}
	if _, err := worker.DecideTicks(t.Context(), "w", 10, true); err != nil {
		t.Errorf("decide ticks as the worker role: %v", err)
	}
	if err := operator.PauseSchedule(t.Context(), "nightly", true, "op"); err != nil {
		t.Errorf("pause a schedule as the operator role: %v", err)
	}
	if err := operator.PauseSchedule(t.Context(), "nightly", false, "op"); err != nil {
		t.Errorf("resume a schedule as the operator role: %v", err)
	}
	if _, err := operator.TriggerSchedule(t.Context(), "nightly", "op"); err != nil {
		t.Errorf("trigger a schedule as the operator role: %v", err)
	}
	if err := readonly.PauseSchedule(t.Context(), "nightly", true, "ro"); err == nil {
		t.Error("the read-only role paused a schedule")
	}
	// A backfill in SQL: the operator asks, a worker carries it out (its
	// check sees the request), the read-only role cannot ask.
	backfill := `SELECT {schema}.backfill_schedule('nightly', now() - interval '3 days', now(), $1)`
	if _, err := operator.Pool().Exec(t.Context(), replaceSchema(backfill, operator.Schema()), "op"); err != nil {
		t.Errorf("ask for a backfill as the operator role: %v", err)
	}
	if p, err := worker.DecideTicks(t.Context(), "w", 10, false); err != nil || !p.Backfill {
		t.Errorf("a worker's check, with a backfill asked: %+v, %v", p, err)
	}
	if req, ok, err := worker.CarryOutBackfill(t.Context(), "w", false); err != nil || !ok || !req.Done || req.Error != "" || len(req.Ticks) != 3 {
		t.Errorf("carry out a backfill as the worker role: %+v, %v, %v; want the 3 days' ticks started", req, ok, err)
	}
	_, err := readonly.Pool().Exec(t.Context(), replaceSchema(backfill, readonly.Schema()), "ro")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("ask for a backfill as the read-only role: %v, want insufficient_privilege", err)
	}
	// tenure runs move, as the operator role (audited); the read-only role
	// may count what would move, and move nothing.
	if _, err := operator.MoveRuns(t.Context(), store.MoveFilter{From: "v1", To: "v2"}, store.MoveOptions{Note: "op"}); err != nil {
		t.Errorf("move pinned runs as the operator role: %v", err)
	}
	if _, err := readonly.MoveRuns(t.Context(), store.MoveFilter{From: "v1", To: "v2"}, store.MoveOptions{DryRun: true}); err != nil {
		t.Errorf("a dry run of a move as the read-only role: %v", err)
	}
	_, err = readonly.MoveRuns(t.Context(), store.MoveFilter{From: "v1", To: "v2"}, store.MoveOptions{Note: "ro"})
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("move pinned runs as the read-only role: %v, want insufficient_privilege", err)
	}
}

// checkFlowRoles: a worker declares a downstream, an operator changes its
// limits and moves its breaker by hand (tenure limits, tenure breaker), a
// read-only role sees it all and changes nothing.
func checkFlowRoles(t *testing.T, worker, operator, readonly *store.Store) {
	t.Helper()
	ctx := t.Context()
	if err := worker.DeclareDownstream(ctx, "payments", []byte(`{"concurrency": 4}`), "w", "attempt"); err != nil {
		t.Fatalf("declare a downstream as the worker role: %v", err)
	}
	// Its attempts take and give back capacity: _flow_commit, and through
	// it _flow_batch (a key's first take inserts its row).
	queue := "q-" + uuid.NewString()[:8]
	for range 2 {
		if _, _, _, err := worker.InsertRun(ctx, worker.Pool(), store.NewRun{ID: uuid.New(), Workflow: "wf", Queue: queue, Input: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := worker.Claim(ctx, []string{"wf"}, []string{queue}, 2, "w", time.Minute)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim as the worker role: %v %+v", err, claimed)
	}
	take := func(c store.Claimed) store.Write {
		return store.Write{Lease: store.Lease{RunID: c.ID, Epoch: c.Epoch}, StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1,
			Activity: "a", Policy: []byte(`{}`), Worker: "w", Take: &store.FlowTake{Downstream: "payments"}}}
	}
	first := take(claimed[0])
	second := take(claimed[1])
	second.Lease, second.StartAttempt = first.Lease, nil
	second.EndAttempt = &store.AttemptEnd{Step: 1, Attempt: 1, Status: "failed", ErrorMessage: "x"}
	second.Gives = []store.FlowGive{{Downstream: "payments", Outcome: store.GiveOK, Step: 1, Attempt: 1}}
	for i, batch := range [][]store.Write{{first}, {second, take(claimed[1])}} {
		res, err := worker.Commit(ctx, worker.Pool(), batch)
		if err != nil || res[0].Err != nil || res[len(res)-1].Denied != nil {
			t.Fatalf("batch %d of takes and gives as the worker role: %v %+v", i, err, res)
		}
	}
	// Its sweeps, with and without the waits counted (_flow_sweep).
	for _, counts := range []bool{true, false} {
		if s, err := worker.FlowSweep(ctx, []string{"payments"}, counts); err != nil || len(s) != 1 || (counts && !s[0].Counted) {
			t.Fatalf("sweep as the worker role, counting %v: %v %+v", counts, err, s)
		}
	}
	if l, err := operator.SetDownstream(ctx, "payments", []byte(`{"concurrency": 2}`), "op"); err != nil || l.Concurrency != 2 {
		t.Errorf("set limits as the operator role: %v, %v", l, err)
	}
	if _, err := operator.ResetDownstream(ctx, "payments", "op"); err != nil {
		t.Errorf("reset limits as the operator role: %v", err)
	}
	if err := operator.OpenBreaker(ctx, "payments", "op"); err != nil {
		t.Errorf("open a breaker as the operator role: %v", err)
	}
	if err := operator.CloseBreaker(ctx, "payments", "op"); err != nil {
		t.Errorf("close a breaker as the operator role: %v", err)
	}
	denied := func(what string, err error) {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s as the read-only role: %v, want insufficient_privilege", what, err)
		}
	}
	_, err = readonly.SetDownstream(ctx, "payments", []byte(`{"concurrency": 1}`), "ro")
	denied("set limits", err)
	_, err = readonly.ResetDownstream(ctx, "payments", "ro")
	denied("reset limits", err)
	denied("declare a downstream", readonly.DeclareDownstream(ctx, "payments", []byte(`{}`), "ro", "attempt"))
	_, err = readonly.FlowSweep(ctx, []string{"payments"}, true)
	denied("sweep downstreams", err)
	denied("open a breaker", readonly.OpenBreaker(ctx, "payments", "ro"))
	denied("close a breaker", readonly.CloseBreaker(ctx, "payments", "ro"))
	if d, err := readonly.Downstream(ctx, "payments"); err != nil || d.Breaker != "closed" || d.Limits.Concurrency != 4 {
		t.Errorf("a downstream, read by the read-only role: %+v, %v", d, err)
	}
	if h, err := readonly.BreakerHistory(ctx, "payments", 0); err != nil || len(h) != 2 {
		t.Errorf("a breaker's history, read by the read-only role: %+v, %v", h, err)
	}
}
