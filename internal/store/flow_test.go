package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// A write whose commit the worker did not learn of is sent again: its take
// must be answered as the first try was, and charged once.
func TestCommit_ARepeatedTakeIsAnsweredAsItsFirstTry(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	if err := st.DeclareDownstream(t.Context(), "one", []byte(`{"concurrency": 1, "rate": 100, "rate_interval_ms": 1000, "burst": 10}`), "w", "attempt"); err != nil {
		t.Fatal(err)
	}
	leases := claimN(t, st, 2)
	pol, _ := json.Marshal(policy.Default())
	start := func(l store.Lease) []store.Write {
		return []store.Write{{Lease: l, StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "a", Policy: pol, Worker: "w",
			Take: &store.FlowTake{Downstream: "one"}}}}
	}
	for try := range 2 {
		w := start(leases[0])
		w[0].Again = try > 0 // as the runtime sends it again
		res, err := st.Commit(t.Context(), st.Pool(), w)
		if err != nil || res[0].Err != nil || res[0].Denied != nil {
			t.Fatalf("try %d of the first run's start: %v %+v", try, err, res[0])
		}
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.flow_slots WHERE run_id IS NOT NULL`); n != 1 {
		t.Errorf("%d slots held after a repeated take, want 1", n)
	}
	if n := scalar[int64](t, st, `SELECT admitted FROM {schema}.downstream_state WHERE name = 'one'`); n != 1 {
		t.Errorf("admitted %d, want 1", n)
	}
	for try := range 2 {
		w := start(leases[1])
		w[0].Again = try > 0
		res, err := st.Commit(t.Context(), st.Pool(), w)
		if err != nil || res[0].Err != nil || res[0].Denied == nil || res[0].Denied.Cause != "concurrency" || res[0].Denied.Wait != store.NoDue {
			t.Fatalf("try %d of the second run's start: %v %+v, want denied by concurrency until woken", try, err, res[0])
		}
	}
	if got := scalar[string](t, st, `SELECT status || ' ' || waiting_for FROM {schema}.runs WHERE id = $1`, leases[1].RunID); got != "queued limit:one" {
		t.Errorf("denied run: %s", got)
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.attempts WHERE run_id = $1`, leases[1].RunID); n != 0 {
		t.Errorf("a denied start recorded %d attempts", n)
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.flow_waiters WHERE run_id = $1`, leases[1].RunID); n != 1 {
		t.Errorf("%d waiter rows for the denied run, want 1", n)
	}
	// The first run's end gives its slot back and wakes the second.
	res, err := st.Commit(t.Context(), st.Pool(), []store.Write{{Lease: leases[0], StepDone: &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)},
		CompleteRun: &store.RunOutput{Output: []byte(`1`)}, Gives: []store.FlowGive{{Downstream: "one", Outcome: store.GiveOK}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("complete: %v %+v", err, res)
	}
	if got := scalar[bool](t, st, `SELECT run_after <= now() FROM {schema}.runs WHERE id = $1`, leases[1].RunID); !got {
		t.Error("the waiter was not woken by the release")
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.flow_slots WHERE run_id IS NOT NULL`); n != 0 {
		t.Errorf("%d slots held after the release", n)
	}
}

// A probe whose attempt ended neither way (a permanent error, a cancel)
// says nothing of the downstream: the next take probes.
func TestCommit_AProbeThatEndedNeitherWayLetsTheNextProbe(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	if err := st.DeclareDownstream(t.Context(), "flaky", []byte(`{"breaker_error_ratio": 0.5}`), "w", "attempt"); err != nil {
		t.Fatal(err)
	}
	leases := claimN(t, st, 2)
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.downstream_state
		SET breaker = 'half_open', probe_run = $1, probe_epoch = $2 WHERE name = 'flaky'`, st.Schema()), leases[0].RunID, leases[0].Epoch); err != nil {
		t.Fatal(err)
	}
	pol, _ := json.Marshal(policy.Default())
	take := []store.Write{{Lease: leases[1], StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "a", Policy: pol, Worker: "w",
		Take: &store.FlowTake{Downstream: "flaky"}}}}
	res, err := st.Commit(t.Context(), st.Pool(), []store.Write{{Lease: leases[0], Gives: []store.FlowGive{{Downstream: "flaky", Outcome: store.GiveNone}},
		EndAttempt: &store.AttemptEnd{Step: 1, Attempt: 1, Status: "failed", ErrorMessage: "permanent"}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("the probe's end: %v %+v", err, res)
	}
	res, err = st.Commit(t.Context(), st.Pool(), take)
	if err != nil || res[0].Err != nil || res[0].Denied != nil {
		t.Fatalf("the next take: %v %+v, want admitted as the probe", err, res[0])
	}
	if got := scalar[string](t, st, `SELECT breaker || ' ' || (probe_run = $1)::text FROM {schema}.downstream_state WHERE name = 'flaky'`, leases[1].RunID); got != "half_open true" {
		t.Errorf("breaker %s, want half_open with the next take its probe", got)
	}
}

// An outage's start opens the breaker though the window still holds the
// successes before it: the last MinCalls calls all failed. A success in
// between starts the streak again.
func TestCommit_ABreakerOpensWhenItsLastMinCallsFailed(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	if err := st.DeclareDownstream(t.Context(), "api", []byte(`{"breaker_error_ratio": 0.5, "breaker_min_calls": 10}`), "w", "attempt"); err != nil {
		t.Fatal(err)
	}
	lease := claimN(t, st, 1)[0]
	give := func(outcomes ...string) {
		t.Helper()
		w := store.Write{Lease: lease}
		for _, o := range outcomes {
			w.Gives = append(w.Gives, store.FlowGive{Downstream: "api", Outcome: o})
		}
		if res, err := st.Commit(t.Context(), st.Pool(), []store.Write{w}); err != nil || res[0].Err != nil {
			t.Fatalf("gives: %v %+v", err, res)
		}
	}
	state := func() string {
		return scalar[string](t, st, `SELECT breaker || ' ' || window_errors || '/' || window_calls || ' ' || error_streak
			FROM {schema}.downstream_state WHERE name = 'api'`)
	}
	n := func(k int, o string) []string {
		s := make([]string, k)
		for i := range s {
			s[i] = o
		}
		return s
	}
	give(n(30, store.GiveOK)...)
	give(append(n(9, store.GiveError), store.GiveOK)...)
	give(n(9, store.GiveError)...)
	if got := state(); got != "closed 18/49 9" {
		t.Fatalf("after 9 errors, a success and 9 errors: %s, want closed 18/49 9", got)
	}
	give(store.GiveNone, store.GiveError) // neither counts for nothing, and breaks no streak
	if got := state(); got != "open 19/50 10" {
		t.Fatalf("after the 10th error in a row: %s, want open 19/50 10", got)
	}
	why := scalar[string](t, st, `SELECT why FROM {schema}.breaker_history WHERE downstream = 'api' ORDER BY id DESC LIMIT 1`)
	if why != "the last 10 calls failed" {
		t.Errorf("the breaker's audit row says %q", why)
	}
}

// A streak of errors is of the window's calls: errors from before the
// window rolled over open nothing.
func TestCommit_AStreakOfErrorsEndsWithItsWindow(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	if err := st.DeclareDownstream(t.Context(), "api", []byte(`{"breaker_error_ratio": 0.5, "breaker_min_calls": 10, "breaker_window_ms": 1}`), "w", "attempt"); err != nil {
		t.Fatal(err)
	}
	lease := claimN(t, st, 1)[0]
	for _, n := range []int{9, 1} {
		w := store.Write{Lease: lease}
		for range n {
			w.Gives = append(w.Gives, store.FlowGive{Downstream: "api", Outcome: store.GiveError})
		}
		if res, err := st.Commit(t.Context(), st.Pool(), []store.Write{w}); err != nil || res[0].Err != nil {
			t.Fatalf("gives: %v %+v", err, res)
		}
		time.Sleep(20 * time.Millisecond) // past the window of 1 ms
	}
	if got := scalar[string](t, st, `SELECT breaker || ' ' || error_streak FROM {schema}.downstream_state WHERE name = 'api'`); got != "closed 1" {
		t.Errorf("9 errors, the window over, then 1: %s, want closed 1", got)
	}
}

// Slots are made as takes need them, at least doubling, never above the
// limit; a lowered limit's free slots above it go.
func TestCommit_SlotsAreMadeAsTheyAreNeededWithinTheLimit(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	start := declarePool(t, st, 5)
	leases := claimN(t, st, 8)
	take := func(ls ...store.Lease) []store.WriteResult {
		t.Helper()
		var ws []store.Write
		for _, l := range ls {
			ws = append(ws, start(l, 1, store.FlowTake{Downstream: "pool"}))
		}
		res, err := st.Commit(t.Context(), st.Pool(), ws)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	rows := func() string {
		return scalar[string](t, st, `SELECT count(*) || ' ' || count(run_id) FROM {schema}.flow_slots WHERE downstream = 'pool'`)
	}
	for _, r := range take(leases[0], leases[1]) {
		if r.Err != nil || r.Denied != nil {
			t.Fatalf("first takes: %+v", r)
		}
	}
	if got := rows(); got != "2 2" {
		t.Errorf("after 2 takes: %s slot rows and held, want 2 2", got)
	}
	res := take(leases[2], leases[3], leases[4], leases[5])
	for i, r := range res {
		if want := i < 3; r.Err != nil || (r.Denied == nil) != want {
			t.Errorf("take %d of 4 with 3 slots left: %+v, admitted want %v", i, r, want)
		}
	}
	if got := rows(); got != "5 5" {
		t.Errorf("at the limit: %s slot rows and held, want 5 5", got)
	}
	// Lowered to 2, with 5 held: denied until 3 are given back; the free
	// slots above 2 go.
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.downstreams SET concurrency = 2 WHERE name = 'pool'`, st.Schema())); err != nil {
		t.Fatal(err)
	}
	var gives []store.Write
	for _, l := range leases[:3] {
		gives = append(gives, store.Write{Lease: l, Gives: []store.FlowGive{{Downstream: "pool", Outcome: store.GiveOK}}})
	}
	if res, err := st.Commit(t.Context(), st.Pool(), gives); err != nil || res[0].Err != nil {
		t.Fatalf("gives: %v %+v", err, res)
	}
	if r := take(leases[6])[0]; r.Err != nil || r.Denied == nil || r.Denied.Cause != "concurrency" {
		t.Errorf("a take with 2 held at a limit of 2: %+v, want denied", r)
	}
	if got := rows(); got != "4 2" {
		t.Errorf("after the lowered limit's take: %s slot rows and held, want 4 2 (slots 1, 2 and the two held above)", got)
	}
	// The holder of slot 5 loses its lease (another epoch): its slot goes
	// too, and with one held, the next take is admitted.
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.runs SET epoch = epoch + 1 WHERE id = $1`, st.Schema()), leases[4].RunID); err != nil {
		t.Fatal(err)
	}
	if r := take(leases[7])[0]; r.Err != nil || r.Denied != nil {
		t.Errorf("a take with 1 held at a limit of 2: %+v, want admitted", r)
	}
	if got := rows(); got != "3 2" {
		t.Errorf("after the dead holder's slot above the limit went: %s slot rows and held, want 3 2 (slots 1, 2, 4)", got)
	}
}

// A retry admitted under a downstream with no retry budget counts as one.
func TestCommit_ARetryAdmittedWithoutABudgetIsCounted(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	start := declarePool(t, st, 5)
	leases := claimN(t, st, 2)
	var ws []store.Write
	for i, l := range leases {
		ws = append(ws, start(l, 1+i, store.FlowTake{Downstream: "pool", Retry: i == 1}))
	}
	res, err := st.Commit(t.Context(), st.Pool(), ws)
	if err != nil || res[0].Err != nil || res[1].Err != nil || res[0].Denied != nil || res[1].Denied != nil {
		t.Fatalf("takes: %v %+v", err, res)
	}
	if got := scalar[string](t, st, `SELECT admitted || ' ' || retries FROM {schema}.downstream_state WHERE name = 'pool'`); got != "2 1" {
		t.Errorf("admitted and retries: %s, want 2 1", got)
	}
}

// declarePool declares downstream "pool" with a concurrency limit of n and
// returns the write that starts attempt n of step 1 of a lease's run with
// a take.
func declarePool(t *testing.T, st *store.Store, n int) func(l store.Lease, attempt int, take store.FlowTake) store.Write {
	t.Helper()
	if err := st.DeclareDownstream(t.Context(), "pool", []byte(fmt.Sprintf(`{"concurrency": %d}`, n)), "w", "attempt"); err != nil {
		t.Fatal(err)
	}
	pol, _ := json.Marshal(policy.Default())
	return func(l store.Lease, attempt int, take store.FlowTake) store.Write {
		return store.Write{Lease: l, StartAttempt: &store.AttemptStart{Step: 1, Attempt: attempt, Activity: "a", Policy: pol, Worker: "w", Take: &take}}
	}
}

// An admitted take is told its slot, and a give that names it frees that
// slot, found by its primary key, and only while the give's run holds it:
// a give naming a slot another run holds frees nothing, and a give naming
// none finds its run's slot among the key's.
func TestCommit_AGiveFreesTheSlotItsTakeWasGiven(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	start := declarePool(t, st, 10)
	leases := claimN(t, st, 3)
	var ws []store.Write
	for _, l := range leases {
		ws = append(ws, start(l, 1, store.FlowTake{Downstream: "pool"}))
	}
	res, err := st.Commit(t.Context(), st.Pool(), ws)
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int32]bool{}
	for i, r := range res {
		if r.Err != nil || r.Denied != nil || r.Slot < 1 || slots[r.Slot] {
			t.Fatalf("take %d: %+v, want admitted with a slot of its own", i, r)
		}
		slots[r.Slot] = true
	}
	held := func() string {
		return scalar[string](t, st, `SELECT coalesce(string_agg(slot::text, ' ' ORDER BY slot), '') FROM {schema}.flow_slots WHERE downstream = 'pool' AND run_id IS NOT NULL`)
	}
	give := func(l store.Lease, slot int32) {
		t.Helper()
		w := store.Write{Lease: l, Gives: []store.FlowGive{{Downstream: "pool", Outcome: store.GiveOK, Slot: slot}}}
		if r, err := st.Commit(t.Context(), st.Pool(), []store.Write{w}); err != nil || r[0].Err != nil {
			t.Fatalf("give: %v %+v", err, r)
		}
	}
	give(leases[0], res[1].Slot) // another run's slot
	if got := held(); got != "1 2 3" {
		t.Fatalf("after a give naming another run's slot: held %q, want 1 2 3", got)
	}
	give(leases[0], res[0].Slot)
	give(leases[2], 0)
	if got, want := held(), fmt.Sprint(res[1].Slot); got != want {
		t.Fatalf("after the gives of runs 1 (its slot) and 3 (no slot): held %q, want %s", got, want)
	}
}

// A run's take of a workflow's concurrency key is told its slot, and so is
// the take of the same run under a later lease (a resumption, a rescue),
// which takes none: the slot it holds already. The run's end gives it back
// by that slot.
func TestCommit_ARunsTakeIsToldTheSlotItHolds(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	if err := st.DeclareDownstream(t.Context(), "wf:key", []byte(`{"concurrency": 2}`), "w", "run"); err != nil {
		t.Fatal(err)
	}
	l := claimN(t, st, 1)[0]
	take := func(l store.Lease) store.WriteResult {
		t.Helper()
		r, err := st.Commit(t.Context(), st.Pool(), []store.Write{{Lease: l, Take: &store.FlowTake{Downstream: "wf:key", Policy: store.PolicyQueue}}})
		if err != nil || r[0].Err != nil || r[0].Denied != nil {
			t.Fatalf("take: %v %+v", err, r)
		}
		return r[0]
	}
	first := take(l)
	if first.Slot < 1 {
		t.Fatalf("the run's take: %+v, want a slot", first)
	}
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.runs SET epoch = epoch + 1 WHERE id = $1`, st.Schema()), l.RunID); err != nil {
		t.Fatal(err)
	}
	// The worker that lost the lease ends the run: refused, and its give
	// frees nothing of the next holder's slot.
	stale := store.Write{Lease: l, Gives: []store.FlowGive{{Downstream: "wf:key", Outcome: store.GiveRun, Slot: first.Slot}},
		CompleteRun: &store.RunOutput{Output: []byte(`1`)}}
	if r, err := st.Commit(t.Context(), st.Pool(), []store.Write{stale}); err != nil || !errors.Is(r[0].Err, store.ErrLeaseLost) {
		t.Fatalf("a stale end: %v %+v, want ErrLeaseLost", err, r)
	}
	if n := scalar[int64](t, st, `SELECT count(run_id) FROM {schema}.flow_slots WHERE downstream = 'wf:key'`); n != 1 {
		t.Fatalf("%d slots held after a stale end's give, want the run's 1", n)
	}
	l.Epoch++
	if again := take(l); again.Slot != first.Slot {
		t.Fatalf("the take under the next lease: slot %d, want %d, the one it holds", again.Slot, first.Slot)
	}
	w := store.Write{Lease: l, Gives: []store.FlowGive{{Downstream: "wf:key", Outcome: store.GiveRun, Slot: first.Slot}}}
	if r, err := st.Commit(t.Context(), st.Pool(), []store.Write{w}); err != nil || r[0].Err != nil {
		t.Fatalf("give: %v %+v", err, r)
	}
	if n := scalar[int64](t, st, `SELECT count(run_id) FROM {schema}.flow_slots WHERE downstream = 'wf:key'`); n != 0 {
		t.Fatalf("%d slots held after the run gave its back, want 0", n)
	}
}

// A write repeated after it may have committed (Again) counts its gives'
// outcomes for the breaker once: not again when the first try committed,
// and once when it did not, whether the attempt ends before _flow in the
// batch (EndAttempt) or after it (the run's end).
func TestCommit_ARepeatedGiveCountsItsOutcomeOnce(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	if err := st.DeclareDownstream(t.Context(), "api", []byte(`{"breaker_error_ratio": 0.9, "breaker_min_calls": 100}`), "w", "attempt"); err != nil {
		t.Fatal(err)
	}
	lease := claimN(t, st, 1)[0]
	pol, _ := json.Marshal(policy.Default())
	commit := func(w store.Write) {
		t.Helper()
		if res, err := st.Commit(t.Context(), st.Pool(), []store.Write{w}); err != nil || res[0].Err != nil || res[0].Denied != nil {
			t.Fatalf("commit: %v %+v", err, res)
		}
	}
	start := func(attempt int) {
		t.Helper()
		commit(store.Write{Lease: lease, StartAttempt: &store.AttemptStart{Step: 1, Attempt: attempt, Activity: "a", Policy: pol, Worker: "w",
			Take: &store.FlowTake{Downstream: "api"}}})
	}
	state := func() string {
		return scalar[string](t, st, `SELECT window_errors || '/' || window_calls || ' ' || errors || '/' || calls
			FROM {schema}.downstream_state WHERE name = 'api'`)
	}
	delay := time.Second
	failed := func(attempt int, again bool) store.Write {
		return store.Write{Lease: lease, Again: again,
			EndAttempt: &store.AttemptEnd{Step: 1, Attempt: attempt, Status: store.AttemptFailed, ErrorMessage: "503", Delay: &delay},
			Gives:      []store.FlowGive{{Downstream: "api", Outcome: store.GiveError, Step: 1, Attempt: int32(attempt)}}}
	}
	start(1)
	commit(failed(1, false))
	commit(failed(1, true)) // its first try committed: counted once
	if got := state(); got != "1/1 1/1" {
		t.Fatalf("after an error's write and its repeat: %s, want 1/1 1/1", got)
	}
	start(2)
	commit(failed(2, true)) // a repeat whose first try did not commit
	if got := state(); got != "2/2 2/2" {
		t.Fatalf("after a repeat whose first try was lost: %s, want 2/2 2/2", got)
	}
	start(3)
	done := store.Write{Lease: lease, Again: true, StepDone: &store.StepDone{Step: 1, Attempt: 3, Output: []byte(`1`)},
		CompleteRun: &store.RunOutput{Output: []byte(`1`)},
		Gives:       []store.FlowGive{{Downstream: "api", Outcome: store.GiveOK, Step: 1, Attempt: 3}}}
	commit(done) // the run's end closes the attempt after _flow: counted
	commit(done) // and its repeat is not
	if got := state(); got != "2/3 2/3" {
		t.Fatalf("after the run's end and its repeat: %s, want 2/3 2/3", got)
	}
}
