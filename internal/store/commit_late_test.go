package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/store"
)

// TestCommit_ALateTryOfAnAttemptStartNeitherHidesNorReopensTheCheckpoint: a
// try of a write that the worker gave up on (a statement timeout, a lost
// connection) may still commit on the server, after the try the worker got
// its answer from. The late try of an attempt's start updates the step's
// row; the step's checkpoint, waiting for it, must still complete the step
// (it is found again by its key, not skipped as a row that moved), and a
// late try committing after the checkpoint must not set the step running
// again.
func TestCommit_ALateTryOfAnAttemptStartNeitherHidesNorReopensTheCheckpoint(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	l := claimN(t, st, 1)[0]
	start := store.Write{Lease: l, StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "a", Policy: []byte(`{}`), Worker: "w"}}
	commit := func(db store.Batcher, w store.Write) error {
		res, err := st.Commit(ctx, db, []store.Write{w})
		if err != nil {
			return err
		}
		return res[0].Err
	}
	if err := commit(st.Pool(), start); err != nil {
		t.Fatal(err)
	}

	// The late try holds the step's row, updated, while the checkpoint runs.
	late, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback(context.WithoutCancel(ctx)) }()
	if err := commit(late, start); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- commit(st.Pool(), store.Write{Lease: l, StepDone: &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`7`)}})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for scalar[int](t, st, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%{schema}.steps%'`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the checkpoint never waited for the late try's row lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	row := `SELECT s.status || '/' || a.status || '/' || coalesce(s.output::text, '') FROM {schema}.steps s
		JOIN {schema}.attempts a USING (run_id, step) WHERE s.run_id = $1 AND s.step = 1`
	if got := scalar[string](t, st, row, l.RunID); got != "completed/succeeded/7" {
		t.Fatalf("step/attempt/output after the checkpoint: %s, want completed/succeeded/7", got)
	}

	// A late try committing after the checkpoint leaves the step completed
	// (and is answered as refused: it is nobody's answer any more).
	if err := commit(st.Pool(), start); err == nil {
		t.Log("the late try was answered as applied") // either answer is moot; the row is what matters
	}
	if got := scalar[string](t, st, row, l.RunID); got != "completed/succeeded/7" {
		t.Fatalf("after a late try of the start: %s, want completed/succeeded/7", got)
	}
}
