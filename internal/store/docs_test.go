package store_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/store"
)

// sqlBlock finds the ```sql blocks of a Markdown file.
var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")

// TestDocs_SQLReferenceQueriesRun executes every sql block of docs/sql.md, in
// order, against a schema holding failed, requeued and completed runs, with
// the schema name and psql variables filled in. A query the docs show must
// run.
func TestDocs_SQLReferenceQueriesRun(t *testing.T) {
	doc, err := os.ReadFile("../../docs/sql.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := sqlBlock.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 15 {
		t.Fatalf("found %d sql blocks in docs/sql.md; the parser or the doc is broken", len(blocks))
	}
	st := newStore(t)
	h := newHistory(t, st)
	failed := h.run(outcome{workflow: "orders", activity: "charge", errors: 3, reason: "retries_exhausted"})
	h.run(outcome{workflow: "orders", activity: "charge", errors: 3, reason: "retries_exhausted"})
	h.run(outcome{workflow: "import", activity: "fetch", errors: 1, reason: "non_retryable"})
	completed := h.run(outcome{workflow: "orders", activity: "email", errors: 2})
	// The downstream the flow control blocks change, as a worker declares it.
	if err := st.DeclareDownstream(t.Context(), "payments", []byte(`{"concurrency": 20, "retry_ratio": 0.2, "retry_per_s": 10}`), "docs-worker", "attempt"); err != nil {
		t.Fatal(err)
	}
	// The schedule the schedules' blocks pause, trigger and backfill, its
	// first tick computed by a worker's pass.
	if err := st.DeclareSchedules(t.Context(), []store.ScheduleDecl{{Name: "nightly-report", Spec: "0 3 * * *", Workflow: "report"}}, "docs-worker"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DecideTicks(t.Context(), "docs-worker", 10, true); err != nil {
		t.Fatal(err)
	}

	schema := pgx.Identifier{st.Schema()}.Sanitize() + "."
	runID := "'" + failed.String() + "'"
	requeued := 0
	for i, b := range blocks {
		q := strings.ReplaceAll(b[1], "tenure.", schema)
		if strings.Contains(q, "delete_run(") { // a finished run's
			q = strings.ReplaceAll(q, ":'run_id'", "'"+completed.String()+"'::uuid")
		}
		q = strings.ReplaceAll(q, ":'run_id'", runID+"::uuid")
		rows, err := st.Pool().Query(t.Context(), q)
		if err != nil {
			t.Fatalf("block %d:\n%s\n%v", i+1, b[1], err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("block %d:\n%s\n%v", i+1, b[1], err)
		}
		if strings.Contains(q, "requeue_run(") {
			requeued++
		}
	}
	if requeued != 1 {
		t.Fatalf("requeue_run ran %d times", requeued)
	}
	// The blocks requeued the failed run, requeued others and purged: the
	// audit log says so.
	audit, err := st.AuditLog(t.Context(), 0)
	if err != nil || len(audit) < 5 {
		t.Fatalf("audit log after the docs' queries: %+v, %v", audit, err)
	}
	// The flow control blocks set and reset the limits, opened and closed
	// the breaker.
	hist, err := st.BreakerHistory(t.Context(), "payments", 0)
	if err != nil || len(hist) != 2 || hist[0].To != "closed" || hist[1].Why != "INC-9: the provider double-charges" {
		t.Fatalf("breaker history after the docs' queries: %+v, %v", hist, err)
	}
	if d, err := st.Downstream(t.Context(), "payments"); err != nil || d.Overridden() || d.Limits.Concurrency != 20 {
		t.Fatalf("downstream after the docs' set and reset: %+v, %v", d, err)
	}
	// The schedules' blocks triggered the schedule and asked for a
	// backfill, which a worker carries out: its three nights' ticks.
	if ticks, err := st.ScheduleTicks(t.Context(), "nightly-report", 0); err != nil || len(ticks) != 1 || ticks[0].Decision != store.TickTriggered {
		t.Fatalf("the schedule's ticks after the docs' trigger: %+v, %v", ticks, err)
	}
	if req, ok, err := st.CarryOutBackfill(t.Context(), "docs-worker", false); err != nil || !ok || !req.Done || len(req.Ticks) != 3 {
		t.Fatalf("the docs' backfill request, carried out: %+v, %v, %v; want the 3 nights' ticks started", req, ok, err)
	}
}
