package store_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

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

// A requeue by filter is counted, broken down, named and performed in SQL:
// the client reads a few rows however many failures there are, the
// requeue selects the set again in its statement, in the window the count
// fixed, and refuses when the set changed; the audit row records the
// filter, the window, the set's size and digest, not the failure IDs.
func TestRequeueFailureSet_CountsAndRequeuesInSQLInAFixedWindow(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	h := newHistory(t, st)
	charge := []uuid.UUID{
		h.run(outcome{workflow: "orders", activity: "charge", errors: 3, reason: policy.RetriesExhausted}),
		h.run(outcome{workflow: "orders", activity: "charge", errors: 3, reason: policy.RetriesExhausted}),
	}
	lost := h.run(outcome{workflow: "orders", activity: "pay", errors: 1, reason: policy.Indeterminate})
	other := h.run(outcome{workflow: "billing", activity: "invoice", errors: 1, reason: policy.NonRetryable})

	set, err := st.FailureSet(t.Context(), store.FailureGroupFilter{Workflow: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.FailureSetGroup{
		{Workflow: "orders", Activity: "charge", Reason: policy.RetriesExhausted, Failures: 2},
		{Workflow: "orders", Activity: "pay", Reason: policy.Indeterminate, Failures: 1},
	}
	if set.Count != 3 || !slices.Equal(set.Breakdown, want) || set.Filter.Until.IsZero() || set.Oldest.After(set.Newest) {
		t.Fatalf("set %+v; want 3 failures, %+v, a window end", set, want)
	}
	digest := scalar[string](t, st, `SELECT md5(string_agg(id::text, ',' ORDER BY id)) FROM {schema}.failures WHERE workflow = 'orders'`)
	if set.Digest != digest {
		t.Fatalf("digest %q, want the md5 of the sorted IDs %q", set.Digest, digest)
	}

	// A failure after the window is not in the set; the requeue acts on the
	// set alone, leaving the indeterminate run failed when asked to.
	late := h.run(outcome{workflow: "orders", activity: "charge", errors: 3, reason: policy.RetriesExhausted})
	n, err := st.RequeueFailureSet(t.Context(), store.RequeueSet{Filter: set.Filter, Digest: set.Digest, SkipIndeterminate: true,
		Note: "INC-11", Audit: map[string]string{"workflow": "orders", "age": "1h"}})
	if err != nil || n != 2 {
		t.Fatalf("requeue: %d, %v; want the 2 charges", n, err)
	}
	status := func(id uuid.UUID) string {
		return scalar[string](t, st, `SELECT status FROM {schema}.runs WHERE id = $1`, id)
	}
	if status(charge[0]) != "queued" || status(charge[1]) != "queued" || status(lost) != "failed" || status(late) != "failed" || status(other) != "failed" {
		t.Fatalf("after the requeue: %s %s %s %s %s", status(charge[0]), status(charge[1]), status(lost), status(late), status(other))
	}
	audit, _ := st.AuditLog(t.Context(), 1)
	f := audit[0].Filter
	if audit[0].Runs != 2 || len(audit[0].RunIDs) != 2 || f["workflow"] != "orders" || f["age"] != "1h" || f["failures"] != 3.0 ||
		f["digest"] != set.Digest || f["until"] != set.Filter.Until.UTC().Format(time.RFC3339Nano) || f["failure_ids"] != nil || audit[0].Note != "INC-11" {
		t.Fatalf("audit row %+v; want 2 runs, the filter, the window, the set's size and digest and no failure IDs", audit[0])
	}

	// The same set again: no longer the one counted (two were requeued).
	if _, err := st.RequeueFailureSet(t.Context(), store.RequeueSet{Filter: set.Filter, Digest: set.Digest}); !errors.Is(err, store.ErrFailuresChanged) {
		t.Fatalf("a stale set: %v, want ErrFailuresChanged", err)
	}
	if status(lost) != "failed" {
		t.Fatal("a refused requeue requeued")
	}

	// A run's audit log is read without the arrays: the run's page of each
	// of a million runs requeued at once does not read the million IDs.
	fid := scalar[int64](t, st, `SELECT id FROM {schema}.failures WHERE run_id = $1 AND requeued_at IS NULL`, other)
	if _, err := st.RequeueFailureIDs(t.Context(), []int64{fid}, "by ID", map[string]string{"workflow": "billing"}); err != nil {
		t.Fatal(err)
	}
	log, err := st.RunAuditLog(t.Context(), other)
	if err != nil || len(log) != 1 || len(log[0].RunIDs) != 0 || log[0].Filter["failure_ids"] != nil ||
		log[0].Filter["workflow"] != "billing" || log[0].Runs != 1 || log[0].Note != "by ID" {
		t.Fatalf("the run's audit log %+v, %v; want its requeue without run or failure IDs", log, err)
	}
	if log, _ := st.RunAuditLog(t.Context(), charge[0]); len(log) != 1 || log[0].Note != "INC-11" {
		t.Fatalf("the audit log of a run requeued in a set: %+v", log)
	}
}
