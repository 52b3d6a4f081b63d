package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/store"
)

// inTx applies writes with store.Commit inside an open transaction, so that a
// test can hold it open while another commit runs.
func inTx(t *testing.T, st *store.Store, writes ...store.Write) pgx.Tx {
	t.Helper()
	tx, err := st.Pool().Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Commit(t.Context(), tx, writes)
	if err != nil || res[0].Err != nil {
		t.Fatalf("commit in a transaction: %v %+v", err, res)
	}
	return tx
}

// childOf makes run c a child of run p, started at p's step 1, which waits
// for it.
func childOf(t *testing.T, st *store.Store, p, c store.Lease) {
	t.Helper()
	for _, q := range []string{
		`UPDATE {schema}.runs SET parent_run_id = $1, parent_step = 1 WHERE id = $2`,
		`INSERT INTO {schema}.steps (run_id, step, activity, kind, status, policy, child_run_id) VALUES ($1, 1, 'wf', 'child', 'waiting', '{}', $2)`,
	} {
		if _, err := st.Pool().Exec(t.Context(), replaceSchema(q, st.Schema()), p.RunID, c.RunID); err != nil {
			t.Fatal(err)
		}
	}
}

func suspendFor(p, c store.Lease) store.Write {
	return store.Write{Lease: p, Release: &store.Release{WaitFor: "child:" + c.RunID.String(), UntilStep: 1}}
}

func complete(c store.Lease) store.Write {
	return store.Write{Lease: c, CompleteRun: &store.RunOutput{Output: []byte(`1`)}, WakeParent: true}
}

func due(t *testing.T, st *store.Store, l store.Lease) bool {
	return scalar[bool](t, st, `SELECT run_after <= now() FROM {schema}.runs WHERE id = $1`, l.RunID)
}

// A child that ends while its parent suspends to wait for it wakes the
// parent, whichever of the two commits first: the suspension reads the
// child FOR SHARE, which orders it against the child's end.
func TestWake_AChildEndingDuringItsParentsSuspensionWakesIt(t *testing.T) {
	t.Parallel()
	for _, childFirst := range []bool{true, false} {
		st := newStore(t)
		l := claimN(t, st, 2)
		p, c := l[0], l[1]
		childOf(t, st, p, c)
		if childFirst {
			// The child's end is in flight; the suspension waits for it,
			// then sees the child completed.
			end := inTx(t, st, complete(c))
			done := make(chan error, 1)
			go func() {
				_, err := st.Commit(context.Background(), st.Pool(), []store.Write{suspendFor(p, c)})
				done <- err
			}()
			time.Sleep(200 * time.Millisecond)
			if err := end.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		} else {
			// The suspension is in flight; the child's end waits for it
			// (its fence cannot lock the child while the suspension holds
			// it FOR SHARE), then finds the parent waiting.
			susp := inTx(t, st, suspendFor(p, c))
			done := make(chan error, 1)
			go func() {
				_, err := st.Commit(context.Background(), st.Pool(), []store.Write{complete(c)})
				done <- err
			}()
			time.Sleep(200 * time.Millisecond)
			if err := susp.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if !due(t, st, p) {
			t.Fatalf("child first %v: the parent waits for a child that ended", childFirst)
		}
	}
}

// A send in a transaction still open holds up neither the heartbeat's
// renewal nor the checkpoints of the run's worker; a suspension meanwhile
// finds the send in flight and wakes the run at once.
func TestWake_ASendInAnOpenTransactionBlocksNoWorkerWriteAndWakesTheSuspension(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	l := claimN(t, st, 1)[0]
	tx, err := st.Pool().Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := st.SendSignal(t.Context(), tx, l.RunID, "go", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	renewed, err := st.Renew(ctx, st.Pool(), []store.Lease{l}, time.Minute, nil)
	if err != nil || !renewed[l].Renewed {
		t.Fatalf("renewal beside an open send: %+v, %v; want renewed without waiting", renewed, err)
	}
	res, err := st.Commit(ctx, st.Pool(), []store.Write{{Lease: l, Release: &store.Release{WaitFor: "signal:go", UntilStep: 1}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("suspension beside an open send: %v %+v", err, res)
	}
	if !due(t, st, l) {
		t.Fatal("the suspension did not wake the run for the send in flight")
	}
}

// A receive repeated while its first try is still in flight (the worker
// gave up waiting for its answer) consumes nothing more: it fails, and the
// next repeat returns what the first try recorded.
func TestReceive_ARepeatRacingItsFirstTryConsumesNothingMore(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	l := claimN(t, st, 1)[0]
	for _, p := range []string{`"first"`, `"second"`} {
		if _, err := st.SendSignal(t.Context(), st.Pool(), l.RunID, "go", []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	recv := store.Write{Lease: l, Receive: &store.SignalReceive{Step: 1, Name: "go"}}
	first := inTx(t, st, recv)
	done := make(chan error, 1)
	go func() {
		_, err := st.Commit(context.Background(), st.Pool(), []store.Write{recv})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := first.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		// Either outcome is safe only if nothing more was consumed.
		t.Log("the racing repeat succeeded")
	}
	res, err := st.Commit(t.Context(), st.Pool(), []store.Write{recv})
	if err != nil || res[0].Err != nil || string(res[0].Marked.Output) != `"first"` || res[0].Marked.Status != store.StepCompleted {
		t.Fatalf("a later repeat: %v %+v; want the first signal, recorded", err, res)
	}
	if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.signals WHERE run_id = $1 AND consumed_step IS NOT NULL`, l.RunID); n != 1 {
		t.Fatalf("%d signals consumed by one step, want 1", n)
	}
}

// A cancel requested just before a run suspends (for a sleep or a retry
// delay) wakes it at once instead of at its due time.
func TestWake_ACancelJustBeforeASuspensionWakesTheRun(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	l := claimN(t, st, 1)[0]
	if requested, err := st.CancelRun(t.Context(), l.RunID); err != nil || !requested {
		t.Fatalf("cancel of a running run: %v, %v", requested, err)
	}
	res, err := st.Commit(t.Context(), st.Pool(), []store.Write{{Lease: l, Release: &store.Release{Delay: time.Hour}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("suspend: %v %+v", err, res)
	}
	if !due(t, st, l) {
		t.Fatal("a cancelled run suspended for an hour")
	}
}

// A failure's error message of any length is recorded: the failure groups'
// index holds a fingerprint of its first 300 characters only.
func TestFailRun_ALongErrorMessageFitsTheFingerprintIndex(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	l := claimN(t, st, 1)[0]
	msg := strings.Repeat("upstream said: 0123456789abcdef ", 2000) // 64 kB
	res, err := st.Commit(t.Context(), st.Pool(), []store.Write{{Lease: l, FailRun: &store.Failure{Reason: "workflow_error", ErrorMessage: msg}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("fail a run with a 64 kB message: %v %+v", err, res)
	}
	if n := scalar[int](t, st, `SELECT length(fingerprint) FROM {schema}.failures WHERE run_id = $1`, l.RunID); n > 300 {
		t.Fatalf("fingerprint of %d characters", n)
	}
}

// RequeueFailureIDs puts back only the runs whose previewed failure row is
// still open: a run requeued meanwhile, which failed again with another
// failure row, is left alone.
func TestRequeueFailureIDs_LeavesARunThatFailedAgainMeanwhile(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	h := newHistory(t, st)
	a := h.run(outcome{workflow: "wf", activity: "x", errors: 1, reason: "non_retryable"})
	b := h.run(outcome{workflow: "wf", activity: "x", errors: 1, reason: "non_retryable"})
	idOf := func(run any) int64 {
		return scalar[int64](t, st, `SELECT id FROM {schema}.failures WHERE run_id = $1 AND requeued_at IS NULL`, run)
	}
	fa, fb := idOf(a), idOf(b)
	// Run b was requeued by someone else and failed again: a new open row.
	for _, q := range []string{
		`UPDATE {schema}.failures SET requeued_at = now() WHERE id = $1`,
		`INSERT INTO {schema}.failures (run_id, workflow, reason) SELECT run_id, workflow, reason FROM {schema}.failures WHERE id = $1`,
	} {
		if _, err := st.Pool().Exec(t.Context(), replaceSchema(q, st.Schema()), fb); err != nil {
			t.Fatal(err)
		}
	}
	done, err := st.RequeueFailureIDs(t.Context(), []int64{fa, fb}, "INC-1", map[string]string{"workflow": "wf"})
	if err != nil || len(done) != 1 || done[0] != a {
		t.Fatalf("requeued %v, %v; want only run %s", done, err, a)
	}
	if s := scalar[string](t, st, `SELECT status FROM {schema}.runs WHERE id = $1`, b); s != "failed" {
		t.Fatalf("run b is %s, want it left failed", s)
	}
	if f := scalar[string](t, st, `SELECT filter->>'workflow' FROM {schema}.audit_log ORDER BY id DESC LIMIT 1`); f != "wf" {
		t.Fatalf("audit filter %q", f)
	}
}

// Sends to one run are numbered in the order they commit: a second send
// waits for the first's transaction, so a signal's ID (the order of
// consumption) never puts a later commit first.
func TestSendSignal_SendsToOneRunAreNumberedInCommitOrder(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	l := claimN(t, st, 1)[0]
	first, err := st.Pool().Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(context.Background())
	if _, err := st.SendSignal(t.Context(), first, l.RunID, "go", []byte(`"A"`)); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	go func() {
		_, err := st.SendSignal(context.Background(), st.Pool(), l.RunID, "go", []byte(`"B"`))
		committed <- err
	}()
	select {
	case err := <-committed:
		t.Fatalf("the second send committed while the first was open (%v): their IDs could disagree with their commits", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if got := scalar[string](t, st, `SELECT string_agg(payload #>> '{}', '' ORDER BY id) FROM {schema}.signals WHERE run_id = $1`, l.RunID); got != "AB" {
		t.Fatalf("signals in ID order %q, want AB (commit order)", got)
	}
}
