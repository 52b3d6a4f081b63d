package store_test

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/store"
)

// TestDelete_OfRunsOrStepsDeletesWhatBelongsToThem: steps and attempts have
// no foreign keys (migration 0008: their checks cost a query per inserted
// row); a DELETE of runs, by any statement, still deletes their steps and
// attempts, and one of steps their attempts, as ON DELETE CASCADE did; a
// TRUNCATE of runs empties them.
func TestDelete_OfRunsOrStepsDeletesWhatBelongsToThem(t *testing.T) {
	st := newStore(t)
	h := newHistory(t, st)
	gone := h.run(outcome{workflow: "wf", activity: "a", errors: 2})
	kept := h.run(outcome{workflow: "wf", activity: "a", errors: 1, reason: "non_retryable"})
	rows := `SELECT (SELECT count(*) FROM {schema}.steps WHERE run_id = $1) * 100 + (SELECT count(*) FROM {schema}.attempts WHERE run_id = $1)`
	if n := scalar[int](t, st, rows, gone); n != 103 {
		t.Fatalf("fixture: 100 × steps + attempts = %d, want 103", n)
	}
	scalar[int](t, st, `WITH d AS (DELETE FROM {schema}.runs WHERE id = $1 RETURNING 1) SELECT count(*) FROM d`, gone)
	if n := scalar[int](t, st, rows, gone); n != 0 {
		t.Fatalf("after the run's deletion: 100 × steps + attempts = %d, want 0", n)
	}
	if n := scalar[int](t, st, rows, kept); n != 101 {
		t.Fatalf("another run's rows: 100 × steps + attempts = %d, want 101", n)
	}
	scalar[int](t, st, `WITH d AS (DELETE FROM {schema}.steps WHERE run_id = $1 RETURNING 1) SELECT count(*) FROM d`, kept)
	if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.attempts WHERE run_id = $1`, kept); n != 0 {
		t.Fatalf("after its steps' deletion the run has %d attempts", n)
	}
	h.run(outcome{workflow: "wf", activity: "a"})
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`TRUNCATE {schema}.runs CASCADE`, st.Schema())); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int](t, st, `SELECT (SELECT count(*) FROM {schema}.steps) + (SELECT count(*) FROM {schema}.attempts)`); n != 0 {
		t.Fatalf("after TRUNCATE runs CASCADE: %d step and attempt rows", n)
	}
}

// TestInFlight_ShowsTheRunningAttemptOnly: the view finds a run's attempt in
// progress as its last attempt, through the primary key, and none while the
// run is between steps.
func TestInFlight_ShowsTheRunningAttemptOnly(t *testing.T) {
	st := newStore(t)
	h := newHistory(t, st)
	h.run(outcome{workflow: "wf", activity: "a"}) // a finished run: not in flight
	if _, _, _, err := st.InsertRun(t.Context(), st.Pool(), store.NewRun{Workflow: "wf", Queue: "default", Input: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	l := claimN(t, st, 1)[0]
	check := func(wantStep, wantAttempt int) {
		t.Helper()
		got, err := st.InFlightRuns(t.Context(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].RunID != l.RunID || got[0].Step != wantStep || got[0].Attempt != wantAttempt {
			t.Fatalf("in flight: %+v, want run %s at step %d attempt %d", got, l.RunID, wantStep, wantAttempt)
		}
	}
	check(0, 0)
	delay := time.Millisecond
	write := func(w store.Write) {
		t.Helper()
		w.Lease = l
		if res, err := st.Commit(t.Context(), st.Pool(), []store.Write{w}); err != nil || res[0].Err != nil {
			t.Fatal(err, res)
		}
	}
	start := func(step, attempt int) *store.AttemptStart {
		return &store.AttemptStart{Step: step, Attempt: attempt, Activity: "a", Policy: []byte(`{}`), Worker: "w"}
	}
	write(store.Write{StartAttempt: start(1, 1)})
	check(1, 1)
	write(store.Write{EndAttempt: &store.AttemptEnd{Step: 1, Attempt: 1, Status: store.AttemptFailed, ErrorMessage: "x", Delay: &delay, DelaySource: "policy"}})
	check(0, 0) // between attempts
	write(store.Write{StartAttempt: start(1, 2)})
	check(1, 2)
	write(store.Write{StepDone: &store.StepDone{Step: 1, Attempt: 2, Output: []byte(`1`)}, StartAttempt: start(2, 1)})
	check(2, 1)
	write(store.Write{StepDone: &store.StepDone{Step: 2, Attempt: 1, Output: []byte(`1`)}})
	check(0, 0)
}
