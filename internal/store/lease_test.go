package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// ExpireLease is a crash without the wait: the holder is fenced out at once
// (its writes and renewals refused), the next claim reclaims the run, and
// the attempt the holder left running is recorded lost.
func TestExpireLease_FencesTheHolderAndLetsTheRunBeReclaimed(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	lease := claimN(t, st, 1)[0]
	pol, _ := json.Marshal(policy.Default())
	start := store.Write{Lease: lease, StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "a", Policy: pol, Worker: "w"}}
	if res, err := st.Commit(t.Context(), st.Pool(), []store.Write{start}); err != nil || res[0].Err != nil {
		t.Fatalf("start attempt: %v %+v", err, res)
	}
	conn := listen(t, st.RunsChannel())

	if err := st.ExpireLease(t.Context(), lease.RunID); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := conn.WaitForNotification(ctx); err != nil {
		t.Fatalf("no notification for idle workers: %v", err)
	}
	renewed, err := st.Renew(t.Context(), st.Pool(), []store.Lease{lease}, time.Minute, nil)
	if _, held := renewed[lease]; err != nil || held {
		t.Fatalf("the old holder renewed its lease: %v %v", renewed, err)
	}
	done := store.Write{Lease: lease, StepDone: &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)}}
	if res, err := st.Commit(t.Context(), st.Pool(), []store.Write{done}); err != nil || !errors.Is(res[0].Err, store.ErrLeaseLost) {
		t.Fatalf("the old holder's write: %v %+v, want ErrLeaseLost", err, res)
	}

	run, err := st.GetRun(t.Context(), lease.RunID)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := st.Claim(t.Context(), []string{"wf"}, []string{run.Queue}, 1, "w2", time.Minute)
	if err != nil || len(claimed) != 1 || !claimed[0].Reclaimed {
		t.Fatalf("reclaim: %v %+v", err, claimed)
	}
	lost, err := st.MarkLost(t.Context(), store.Lease{RunID: lease.RunID, Epoch: claimed[0].Epoch})
	if err != nil || len(lost) != 1 || lost[0].Step != 1 || lost[0].Attempt != 1 {
		t.Fatalf("lost attempts: %v %+v", err, lost)
	}
}

func TestExpireLease_RefusesARunWithoutALease(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	id := uuid.New()
	if _, _, _, err := st.InsertRun(t.Context(), st.Pool(), store.NewRun{ID: id, Workflow: "wf", Queue: "q", Input: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := st.ExpireLease(t.Context(), id); !errors.Is(err, store.ErrNotRunning) {
		t.Errorf("queued run: %v, want ErrNotRunning", err)
	}
	if err := st.ExpireLease(t.Context(), uuid.New()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("no such run: %v, want ErrNotFound", err)
	}
}
