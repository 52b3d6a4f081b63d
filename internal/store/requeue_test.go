package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/internal/store"
)

func replaceSchema(q, schema string) string {
	return strings.ReplaceAll(q, "{schema}", pgx.Identifier{schema}.Sanitize())
}

func TestRequeueRun_IsTheSQLFunctionAndDoesEverythingItPromises(t *testing.T) {
	st := newStore(t)
	h := newHistory(t, st)
	id := h.run(outcome{workflow: "wf", activity: "charge", errors: 3, reason: "retries_exhausted"})

	// A worker of this schema is listening.
	conn, err := st.Pool().Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{st.RunsChannel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	if err := st.RequeueRunWithNote(t.Context(), id, "INC-7"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(ctx)
	if err != nil || n.Channel != st.RunsChannel() || !strings.HasPrefix(n.Payload, "q-") {
		t.Fatalf("notification %+v, %v: want the run's queue on %s", n, err, st.RunsChannel())
	}
	if _, err := conn.Exec(t.Context(), "UNLISTEN *"); err != nil {
		t.Fatal(err)
	}

	r, err := st.GetRun(t.Context(), id)
	if err != nil || r.Status != "queued" || r.Requeues != 1 || r.Failure != nil || r.ErrorMessage != "" {
		t.Fatalf("run after requeue %+v, %v", r, err)
	}
	all, _ := st.Failures(t.Context(), store.FailureFilter{RunID: id, IncludeRequeued: true})
	if len(all) != 1 || all[0].RequeuedAt == nil || all[0].RequeueCount != 1 {
		t.Fatalf("failure rows %+v: want one, marked requeued once", all)
	}
	steps, _ := st.Steps(t.Context(), id)
	if s := steps[1]; s.Status != "running" || s.BudgetFrom != 3 || s.Errors != 0 || s.Reason != "" {
		t.Fatalf("step after requeue %+v: want running with a fresh budget from attempt 3", s)
	}
	audit, _ := st.AuditLog(t.Context(), 0)
	if len(audit) != 1 || audit[0].Action != "requeue" || audit[0].Runs != 1 || audit[0].Note != "INC-7" ||
		!slices.Equal(audit[0].RunIDs, []uuid.UUID{id}) || audit[0].Filter["run_id"] != id.String() {
		t.Fatalf("audit %+v", audit)
	}

	if err := st.RequeueRun(t.Context(), id); !errors.Is(err, store.ErrNotFailed) || !strings.Contains(err.Error(), "is queued") {
		t.Fatalf("requeue of a queued run: %v, want ErrNotFailed naming the status", err)
	}
	if err := st.RequeueRun(t.Context(), uuid.New()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("requeue of an unknown run: %v, want ErrNotFound", err)
	}
	if audit, _ := st.AuditLog(t.Context(), 0); len(audit) != 1 {
		t.Fatalf("refused requeues wrote audit rows: %+v", audit)
	}
}

func TestRequeueFailures_FilterDryRunAndAudit(t *testing.T) {
	st := newStore(t)
	h := newHistory(t, st)
	charge1 := h.run(outcome{workflow: "orders", activity: "charge", errors: 3, reason: "retries_exhausted"})
	charge2 := h.run(outcome{workflow: "orders", activity: "charge", errors: 3, reason: "retries_exhausted"})
	h.run(outcome{workflow: "orders", activity: "charge", errors: 1, reason: "non_retryable"})
	h.run(outcome{workflow: "orders", activity: "email", errors: 3, reason: "retries_exhausted"})
	h.run(outcome{workflow: "orders", activity: "email", errors: 0}) // completed

	if _, err := st.RequeueFailures(t.Context(), store.RequeueFilter{}, store.RequeueOptions{DryRun: true}); !errors.Is(err, store.ErrNoFilter) {
		t.Fatalf("empty filter: %v, want ErrNoFilter", err)
	}
	f := store.RequeueFilter{Activity: "charge", Reason: "retries_exhausted"}
	plan, err := st.RequeueFailures(t.Context(), f, store.RequeueOptions{DryRun: true})
	if err != nil || len(plan) != 2 || plan[0].RunID != charge1 || plan[1].RunID != charge2 || plan[0].Requeued {
		t.Fatalf("dry run %+v, %v: want the two charge runs, oldest first, not requeued", plan, err)
	}
	if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.open_failures`); n != 4 {
		t.Fatalf("a dry run changed something: %d open failures, want 4", n)
	}
	if audit, _ := st.AuditLog(t.Context(), 0); len(audit) != 0 {
		t.Fatalf("a dry run wrote audit rows: %+v", audit)
	}

	done, err := st.RequeueFailures(t.Context(), f, store.RequeueOptions{Note: "fixed the card bug"})
	if err != nil || len(done) != 2 || !done[0].Requeued || !done[1].Requeued {
		t.Fatalf("requeue %+v, %v", done, err)
	}
	for _, id := range []uuid.UUID{charge1, charge2} {
		if r, _ := st.GetRun(t.Context(), id); r.Status != "queued" || r.Requeues != 1 {
			t.Fatalf("run %s is %s after requeue", id, r.Status)
		}
	}
	audit, _ := st.AuditLog(t.Context(), 0)
	if len(audit) != 1 || audit[0].Runs != 2 || audit[0].Note != "fixed the card bug" ||
		audit[0].Filter["activity"] != "charge" || audit[0].Filter["reason"] != "retries_exhausted" || len(audit[0].RunIDs) != 2 {
		t.Fatalf("audit %+v", audit)
	}

	rest, err := st.RequeueFailures(t.Context(), store.RequeueFilter{All: true}, store.RequeueOptions{DryRun: true})
	if err != nil || len(rest) != 2 {
		t.Fatalf("All: %+v, %v: want the two failures left", rest, err)
	}
}

func TestRequeueFailures_BatchesReportProgressAndAuditEachBatch(t *testing.T) {
	st := newStore(t)
	h := newHistory(t, st)
	for range 7 {
		h.run(outcome{workflow: "import", activity: "fetch", errors: 1, reason: "non_retryable"})
	}
	var progress [][2]int
	done, err := st.RequeueFailures(t.Context(), store.RequeueFilter{Workflow: "import"}, store.RequeueOptions{
		BatchSize: 3, Note: "bulk",
		Progress: func(d, total int) { progress = append(progress, [2]int{d, total}) },
	})
	if err != nil || len(done) != 7 {
		t.Fatalf("requeued %d, %v", len(done), err)
	}
	if want := [][2]int{{3, 7}, {6, 7}, {7, 7}}; !slices.Equal(progress, want) {
		t.Fatalf("progress %v, want %v", progress, want)
	}
	audit, _ := st.AuditLog(t.Context(), 0)
	var counts []int64
	for _, a := range audit {
		counts = append(counts, a.Runs)
	}
	if !slices.Equal(counts, []int64{1, 3, 3}) { // newest first
		t.Fatalf("audit counts %v, want one row per batch", counts)
	}
	if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.runs WHERE status = 'queued' AND requeues = 1`); n != 7 {
		t.Fatalf("%d runs requeued, want 7", n)
	}
}

func TestPurge_DeletesOnlyWhatItSaysAndCountsIt(t *testing.T) {
	st := newStore(t)
	h := newHistory(t, st)
	completed := h.run(outcome{workflow: "wf", activity: "a"})
	failed := h.run(outcome{workflow: "wf", activity: "a", errors: 2, reason: "retries_exhausted"})
	healed := h.run(outcome{workflow: "wf", activity: "a", errors: 1, reason: "non_retryable"})
	if err := st.RequeueRun(t.Context(), healed); err != nil {
		t.Fatal(err)
	}
	// The healed run completes after its requeue: it has failure history.
	claimed, err := st.Claim(t.Context(), []string{"wf"}, []string{scalar[string](t, st, `SELECT queue FROM {schema}.runs WHERE id = $1`, healed)}, 1, "w", time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatal(err)
	}
	lease := store.Lease{RunID: healed, Epoch: claimed[0].Epoch}
	if res, err := st.Commit(t.Context(), st.Pool(), []store.Write{{Lease: lease, CompleteRun: &store.RunOutput{Output: []byte(`1`)}}}); err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}

	if p, err := st.PurgeCompleted(t.Context(), store.PurgeOptions{OlderThan: time.Hour}); err != nil || p.Runs != 0 {
		t.Fatalf("purge of runs older than an hour: %+v, %v", p, err)
	}
	if p, err := st.PurgeCompleted(t.Context(), store.PurgeOptions{DryRun: true}); err != nil || p.Runs != 1 {
		t.Fatalf("dry run: %+v, %v", p, err)
	}
	if p, err := st.PurgeCompleted(t.Context(), store.PurgeOptions{Note: "nightly"}); err != nil || p != (store.Purged{Runs: 1}) {
		t.Fatalf("purge completed: %+v, %v", p, err)
	}
	if _, err := st.GetRun(t.Context(), completed); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("completed run still there: %v", err)
	}
	for _, id := range []uuid.UUID{failed, healed} {
		if _, err := st.GetRun(t.Context(), id); err != nil {
			t.Fatalf("purge of completed runs deleted run %s with failure history: %v", id, err)
		}
	}

	if p, err := st.PurgeFailures(t.Context(), store.PurgeOptions{DryRun: true}); err != nil || p != (store.Purged{Runs: 2, Failures: 2}) {
		t.Fatalf("dry run of failure purge: %+v, %v", p, err)
	}
	if p, err := st.PurgeFailures(t.Context(), store.PurgeOptions{Note: "GDPR"}); err != nil || p != (store.Purged{Runs: 2, Failures: 2}) {
		t.Fatalf("failure purge: %+v, %v", p, err)
	}
	if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.failures`); n != 0 {
		t.Fatalf("%d failure rows left", n)
	}
	audit, _ := st.AuditLog(t.Context(), 0)
	var got []string
	for _, a := range audit {
		got = append(got, a.String())
	}
	want := []string{"purge_failures 2 runs (2 failure rows) by " + audit[0].Actor + " (GDPR)",
		"purge_completed 1 runs by " + audit[0].Actor + " (nightly)",
		"purge_completed 0 runs by " + audit[0].Actor,
		"requeue 1 runs by " + audit[0].Actor}
	if !slices.Equal(got, want) {
		t.Fatalf("audit\n%q\nwant\n%q", got, want)
	}
	if _, err := st.PurgeCompleted(t.Context(), store.PurgeOptions{OlderThan: -time.Second}); err == nil {
		t.Fatal("negative age accepted")
	}
}

// A purge keeps a finished child run while its parent may still read it
// (queued, running, or failed and so requeueable): a parent resuming after
// its child was purged would wait for it for ever. Once the parent
// completes, the next purge takes both.
func TestPurge_KeepsAChildItsParentMayStillRead(t *testing.T) {
	st := newStore(t)
	h := newHistory(t, st)
	parent := h.run(outcome{workflow: "parent", activity: "a"})
	child := h.run(outcome{workflow: "child", activity: "a"})
	failedChild := h.run(outcome{workflow: "child", activity: "a", errors: 1, reason: "non_retryable"})
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.runs SET parent_run_id = $1, parent_step = 1 WHERE id = ANY ($2)`,
		parent, []uuid.UUID{child, failedChild})
	for _, status := range []string{"queued", "running", "failed"} {
		exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.runs SET status = $2, finished_at = CASE WHEN $2 = 'failed' THEN now() END,
			lease_expires_at = CASE WHEN $2 = 'running' THEN now() + interval '1 minute' END WHERE id = $1`,
			parent, status)
		if p, err := st.PurgeCompleted(t.Context(), store.PurgeOptions{}); err != nil || p.Runs != 0 {
			t.Fatalf("parent %s: purge of completed runs %+v, %v; want the child kept", status, p, err)
		}
		if p, err := st.PurgeCompleted(t.Context(), store.PurgeOptions{Before: time.Now().Add(time.Hour)}); err != nil || p.Runs != 0 {
			t.Fatalf("parent %s: purge of completed runs by cutoff %+v, %v; want the child kept", status, p, err)
		}
		sample, _, err := st.PurgeSample(t.Context(), store.PurgeOptions{}, 0)
		if err != nil || slices.ContainsFunc(sample, func(c store.PurgeCandidate) bool { return c.RunID != parent }) {
			t.Fatalf("parent %s: purge sample %+v, %v; want the failed child kept", status, sample, err)
		}
		if p, err := st.PurgeFailures(t.Context(), store.PurgeOptions{}); err != nil || p.Runs != 0 {
			t.Fatalf("parent %s: purge of failures %+v, %v; want the failed child kept", status, p, err)
		}
	}
	for _, id := range []uuid.UUID{child, failedChild} {
		if _, err := st.GetRun(t.Context(), id); err != nil {
			t.Fatalf("child %s purged while its parent may read it: %v", id, err)
		}
	}
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.runs SET status = 'completed', finished_at = now() - interval '1 second' WHERE id = $1`, parent)
	if p, err := st.PurgeCompleted(t.Context(), store.PurgeOptions{}); err != nil || p.Runs != 2 {
		t.Fatalf("once the parent completed: purge of completed runs %+v, %v; want the parent and its child", p, err)
	}
	if p, err := st.PurgeFailures(t.Context(), store.PurgeOptions{}); err != nil || p.Runs != 1 {
		t.Fatalf("once the parent completed: purge of failures %+v, %v; want the failed child", p, err)
	}
}

func TestListRunsStepRecordsAndFailureCounts(t *testing.T) {
	st := newStore(t)
	h := newHistory(t, st)
	failed := h.run(outcome{workflow: "wf", activity: "charge", errors: 2, reason: "retries_exhausted"})
	h.run(outcome{workflow: "wf", activity: "charge"})
	h.run(outcome{workflow: "other", activity: "x"})

	runs, err := st.ListRuns(t.Context(), store.RunFilter{Workflow: "wf"})
	if err != nil || len(runs) != 2 || runs[1].ID != failed || runs[1].Reason != "retries_exhausted" || runs[1].Activity != "charge" {
		t.Fatalf("ListRuns %+v, %v", runs, err)
	}
	if runs, _ := st.ListRuns(t.Context(), store.RunFilter{Status: "failed"}); len(runs) != 1 {
		t.Fatalf("failed runs %+v", runs)
	}
	steps, err := st.StepRecords(t.Context(), failed)
	if err != nil || len(steps) != 1 || steps[0].Status != "failed" || steps[0].Reason != "retries_exhausted" || len(steps[0].Policy) == 0 {
		t.Fatalf("StepRecords %+v, %v", steps, err)
	}
	counts, err := st.FailureCounts(t.Context(), time.Hour, time.Now().Add(-time.Hour))
	if err != nil || len(counts) != 1 || counts[0].Failures != 1 || counts[0].StillOpen != 1 || counts[0].Activity != "charge" {
		t.Fatalf("FailureCounts %+v, %v", counts, err)
	}
	// The SQL function refuses a width that is not positive, with a clear
	// error (it divided by zero).
	for _, width := range []string{"'0'", "'-1 hour'", "NULL"} {
		_, err := st.Pool().Exec(t.Context(), replaceSchema(`SELECT * FROM {schema}.failure_buckets(`+width+`::interval)`, st.Schema()))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, "positive interval") {
			t.Errorf("failure_buckets(%s): %v, want 22023 asking for a positive interval", width, err)
		}
	}
}
