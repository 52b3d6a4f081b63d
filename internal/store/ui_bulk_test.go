package store_test

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// A purge's count, its sample and the purge itself select the runs through
// one SQL function against one cutoff; the count and the sample lock no run
// (a dry run of version 2's purge_failures row-locked, and so dirtied,
// every run it counted), and the purge's audit row records the cutoff
// itself, not an age from the moment it ran.
func TestPurgeFailures_CountLocksNothingAndTheAuditRowRecordsTheCutoff(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	h := newHistory(t, st)
	for range 3 {
		h.run(outcome{workflow: "import", activity: "parse", errors: 1, reason: policy.NonRetryable})
	}
	h.run(outcome{workflow: "orders", activity: "charge", errors: 1, reason: policy.RetriesExhausted})
	before, err := st.PurgeCutoff(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	late := h.run(outcome{workflow: "import", activity: "parse", errors: 1, reason: policy.NonRetryable}) // after the cutoff

	// xmax of a row changes when a transaction locks it (FOR UPDATE).
	const locks = `SELECT string_agg(id::text || ':' || xmax::text, ',' ORDER BY id) FROM {schema}.runs`
	was := scalar[string](t, st, locks)
	o := store.PurgeOptions{Before: before, DryRun: true}
	counted, err := st.PurgeFailures(t.Context(), o)
	if err != nil || counted != (store.Purged{Runs: 4, Failures: 4}) {
		t.Fatalf("dry run: %+v, %v; want 4 runs and 4 failure rows", counted, err)
	}
	sample, byWorkflow, err := st.PurgeSample(t.Context(), o, 2)
	if err != nil || len(sample) != 2 || len(byWorkflow) != 2 || byWorkflow[0] != (store.PurgeWorkflow{Workflow: "import", Runs: 3}) ||
		byWorkflow[1] != (store.PurgeWorkflow{Workflow: "orders", Runs: 1}) {
		t.Fatalf("sample %+v by workflow %+v, %v; want 2 of them, 3 of import and 1 of orders", sample, byWorkflow, err)
	}
	if now := scalar[string](t, st, locks); now != was {
		t.Fatalf("the count and the sample locked runs: their xmax went from %s to %s", was, now)
	}

	o.DryRun, o.Note = false, "RET-7"
	done, err := st.PurgeFailures(t.Context(), o)
	if err != nil || done != counted {
		t.Fatalf("purge: %+v, %v; want what the dry run counted, %+v", done, err, counted)
	}
	if scalar[int64](t, st, `SELECT count(*) FROM {schema}.runs WHERE id = $1`, late) != 1 {
		t.Fatal("the run that failed after the cutoff was purged")
	}
	audit, err := st.AuditLog(t.Context(), 1)
	if err != nil || len(audit) != 1 {
		t.Fatalf("audit log %+v, %v", audit, err)
	}
	at, err := time.Parse(time.RFC3339Nano, audit[0].Filter["before"].(string))
	if err != nil || !at.Equal(before) || audit[0].Filter["older_than"] != nil || audit[0].Runs != 4 || audit[0].Note != "RET-7" {
		t.Fatalf("audit row %+v (%v); want the cutoff %s, no age, 4 runs", audit[0], err, before)
	}

	// By age, as the CLI and SQL users purge: the audit row has the age and
	// the cutoff it made of it.
	if _, err := st.PurgeFailures(t.Context(), store.PurgeOptions{OlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
	audit, _ = st.AuditLog(t.Context(), 1)
	if audit[0].Filter["older_than"] != "01:00:00" || audit[0].Filter["before"] == nil {
		t.Fatalf("audit row of a purge by age: filter %v, want older_than and before", audit[0].Filter)
	}
	if _, err := st.PurgeFailures(t.Context(), store.PurgeOptions{OlderThan: time.Hour, Before: before}); err == nil {
		t.Fatal("a purge by an age and a cutoff at once was accepted")
	}

	// Completed runs against a cutoff too.
	h.run(outcome{workflow: "import", activity: "parse"})
	cut, _ := st.PurgeCutoff(t.Context(), 0)
	if p, err := st.PurgeCompleted(t.Context(), store.PurgeOptions{Before: cut, Note: "nightly"}); err != nil || p.Runs != 1 {
		t.Fatalf("purge completed before a cutoff: %+v, %v; want 1 run", p, err)
	}
	audit, _ = st.AuditLog(t.Context(), 1)
	if audit[0].Action != "purge_completed" || audit[0].Filter["before"] == nil {
		t.Fatalf("audit row %+v, want purge_completed with its cutoff", audit[0])
	}
}
