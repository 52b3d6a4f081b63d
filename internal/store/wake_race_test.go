package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
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
// parent, whichever of the two commits first, and neither waits for the
// other's transaction: a suspension that finds the child's row locked (its
// end in flight) leaves a wake, which a worker applies once the child's row
// is free; an end that finds the suspension in flight waits for it (the
// suspension holds the child FOR SHARE for a moment), then finds the parent
// waiting.
func TestWake_AChildEndingDuringItsParentsSuspensionWakesIt(t *testing.T) {
	t.Parallel()
	for _, childFirst := range []bool{true, false} {
		st := newStore(t)
		l := claimN(t, st, 2)
		p, c := l[0], l[1]
		childOf(t, st, p, c)
		if childFirst {
			end := inTx(t, st, complete(c))
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			res, err := st.Commit(ctx, st.Pool(), []store.Write{suspendFor(p, c)})
			cancel()
			if err != nil || res[0].Err != nil {
				t.Fatalf("the suspension beside the child's end in flight: %v %+v; want it committed without waiting", err, res)
			}
			if due(t, st, p) {
				t.Fatal("the parent is due while its child's end is in flight")
			}
			if w, err := st.ApplyWakes(t.Context(), nil); err != nil || w.Left != 1 || due(t, st, p) {
				t.Fatalf("wakes applied while the child's row is busy: %+v, %v; want the wake kept", w, err)
			}
			if err := end.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			if w, err := st.ApplyWakes(t.Context(), nil); err != nil || w.Left != 0 {
				t.Fatalf("wakes applied after the child's end: %+v, %v", w, err)
			}
		} else {
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
		if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.wakes`); n != 0 {
			t.Fatalf("child first %v: %d wakes left", childFirst, n)
		}
	}
}

// A send in a transaction still open locks nothing a worker needs: the run
// it is sent to is claimed when it is due, rescued when its worker is gone,
// renewed, checkpointed and suspended by its worker, and cancelled, each
// without waiting for the sender; once the send commits, a worker's
// applying the wakes makes the suspended run due.
func TestSend_InAnOpenTransactionLocksNothingAWorkerNeeds(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	queue := "q-" + uuid.NewString()[:8]
	send := func(run uuid.UUID) pgx.Tx {
		t.Helper()
		tx, err := st.Pool().Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		if _, err := st.SendSignal(t.Context(), tx, run, "go", []byte(`1`)); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	claim := func(what string, want uuid.UUID) store.Lease {
		t.Helper()
		got, err := st.Claim(ctx, []string{"wf"}, []string{queue}, 10, "w", time.Minute)
		if err != nil || len(got) != 1 || got[0].ID != want {
			t.Fatalf("%s beside an open send: %+v, %v; want the run taken without waiting", what, got, err)
		}
		return store.Lease{RunID: got[0].ID, Epoch: got[0].Epoch}
	}

	// A due run is claimed.
	run := store.NewRun{ID: uuid.New(), Workflow: "wf", Queue: queue, Input: []byte(`{}`)}
	if _, _, _, err := st.InsertRun(ctx, st.Pool(), run); err != nil {
		t.Fatal(err)
	}
	tx := send(run.ID)
	l := claim("a claim", run.ID)
	// Its worker renews the lease, checkpoints and suspends to wait.
	if renewed, err := st.Renew(ctx, st.Pool(), []store.Lease{l}, time.Minute, nil); err != nil || !renewed[l].Renewed {
		t.Fatalf("renewal beside an open send: %+v, %v", renewed, err)
	}
	res, err := st.Commit(ctx, st.Pool(), []store.Write{{Lease: l,
		Mark: &store.StepMark{Step: 1, Kind: store.KindNow, Name: "now", Status: store.StepCompleted}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("checkpoint beside an open send: %v %+v", err, res)
	}
	res, err = st.Commit(ctx, st.Pool(), []store.Write{{Lease: l, Receive: &store.SignalReceive{Step: 2, Name: "go"},
		Release: &store.Release{WaitFor: "signal:go", UntilStep: 2}}})
	if err != nil || res[0].Err != nil || res[0].Marked.Status != store.StepWaiting {
		t.Fatalf("suspension beside an open send: %v %+v", err, res)
	}
	if _, err := st.ApplyWakes(ctx, nil); err != nil || due(t, st, l) {
		t.Fatalf("wakes applied before the send committed: %v; the run is due for a signal not yet sent", err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if w, err := st.ApplyWakes(ctx, nil); err != nil || w.Left != 0 || !due(t, st, l) {
		t.Fatalf("wakes applied after the send: %+v, %v; want the run due", w, err)
	}
	l = claim("the woken run's claim", run.ID)

	// A run whose worker is gone is rescued, and a cancel does not wait.
	tx = send(run.ID)
	if _, err := st.Pool().Exec(ctx, replaceSchema(`UPDATE {schema}.runs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, st.Schema()), run.ID); err != nil {
		t.Fatal(err)
	}
	rescued := claim("a rescue", run.ID)
	if rescued.Epoch <= l.Epoch {
		t.Fatalf("rescued at epoch %d after %d", rescued.Epoch, l.Epoch)
	}
	if requested, err := st.CancelRun(ctx, run.ID); err != nil || !requested {
		t.Fatalf("cancel beside an open send: %v, %v; want it asked without waiting", requested, err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if w, err := st.ApplyWakes(ctx, []uuid.UUID{run.ID}); err != nil || len(w.Cancelled) != 1 {
		t.Fatalf("wakes applied: %+v, %v; want the cancel reported", w, err)
	}
	if !scalar[bool](t, st, `SELECT cancel_requested_at IS NOT NULL FROM {schema}.runs WHERE id = $1`, run.ID) {
		t.Fatal("the cancel was not recorded on the run")
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
// delay) wakes it at once instead of at its due time, whether a worker
// applies it before the suspension or after.
func TestWake_ACancelJustBeforeASuspensionWakesTheRun(t *testing.T) {
	t.Parallel()
	for _, appliedFirst := range []bool{true, false} {
		st := newStore(t)
		l := claimN(t, st, 1)[0]
		if requested, err := st.CancelRun(t.Context(), l.RunID); err != nil || !requested {
			t.Fatalf("cancel of a running run: %v, %v", requested, err)
		}
		if appliedFirst {
			if _, err := st.ApplyWakes(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
		}
		res, err := st.Commit(t.Context(), st.Pool(), []store.Write{{Lease: l, Release: &store.Release{Delay: time.Hour}}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("suspend: %v %+v", err, res)
		}
		if !appliedFirst {
			if _, err := st.ApplyWakes(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
		}
		if !due(t, st, l) {
			t.Fatalf("applied first %v: a cancelled run suspended for an hour", appliedFirst)
		}
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

// A wake whose run's row stays locked (a caller's open transaction) is
// passed over: the wakes behind it are applied, however many it is.
func TestWake_ABusyWakeHoldsUpNoneBehindIt(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	l := claimN(t, st, 2)
	busy, waiting := l[0], l[1]
	res, err := st.Commit(t.Context(), st.Pool(), []store.Write{{Lease: waiting, Receive: &store.SignalReceive{Step: 1, Name: "go"},
		Release: &store.Release{WaitFor: "signal:go", UntilStep: 1}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("suspend: %v %+v", err, res)
	}
	for _, id := range []uuid.UUID{busy.RunID, waiting.RunID} { // the busy run's wake first
		if _, err := st.SendSignal(t.Context(), st.Pool(), id, "go", []byte(`1`)); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := st.Pool().Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), replaceSchema(`SELECT 1 FROM {schema}.runs WHERE id = $1 FOR NO KEY UPDATE`, st.Schema()), busy.RunID); err != nil {
		t.Fatal(err)
	}
	var applied, left int
	if err := st.Pool().QueryRow(t.Context(), replaceSchema(`SELECT applied, busy FROM {schema}.apply_wakes(1)`, st.Schema())).Scan(&applied, &left); err != nil {
		t.Fatal(err)
	}
	if applied != 1 || left != 1 || !due(t, st, waiting) {
		t.Fatalf("apply_wakes(1) behind a busy wake: applied %d, busy %d, waiting run due %v; want the one behind applied", applied, left, due(t, st, waiting))
	}
}

// The cancel of a child that has not started, in a caller's open
// transaction, locks the child's row alone, not its waiting parent's: the
// parent is woken by a wake once the cancel commits.
func TestCancel_OfAnUnstartedChildInAnOpenTransactionLeavesItsParentsRowFree(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	p := claimN(t, st, 1)[0]
	child := store.ChildID(p.RunID, 1)
	res, err := st.Commit(t.Context(), st.Pool(), []store.Write{{Lease: p,
		StartChild: &store.ChildStart{Step: 1, ID: child, Workflow: "never-claimed", Queue: "default", Input: []byte(`{}`)},
		Release:    &store.Release{WaitFor: "child:" + child.String(), UntilStep: 1}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("start the child and wait: %v %+v", err, res)
	}
	tx, err := st.Pool().Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var did string
	if err := tx.QueryRow(t.Context(), replaceSchema(`SELECT {schema}.cancel_run($1)`, st.Schema()), child).Scan(&did); err != nil || did != "cancelled" {
		t.Fatalf("cancel of the unstarted child: %q, %v", did, err)
	}
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`SELECT 1 FROM {schema}.runs WHERE id = $1 FOR NO KEY UPDATE NOWAIT`, st.Schema()), p.RunID); err != nil {
		t.Fatalf("the parent's row while the child's cancel is open: %v; want it free", err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyWakes(t.Context(), nil); err != nil || !due(t, st, p) {
		t.Fatalf("after the cancel and its wake: %v; the parent is due %v, want woken", err, due(t, st, p))
	}
}
