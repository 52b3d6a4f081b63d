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
	if got := scalar[string](t, st, `SELECT in_use || ' ' || (SELECT count(*) FROM {schema}.attempts WHERE hold_key IS NOT NULL)
		FROM {schema}.flow_keys WHERE downstream = 'one'`); got != "1 1" {
		t.Errorf("count and holders after a repeated take: %s, want 1 1", got)
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
	// The first run's end gives its capacity back and wakes the second.
	res, err := st.Commit(t.Context(), st.Pool(), []store.Write{{Lease: leases[0], StepDone: &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)},
		CompleteRun: &store.RunOutput{Output: []byte(`1`)}, Gives: []store.FlowGive{{Downstream: "one", Outcome: store.GiveOK, Step: 1, Attempt: 1}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("complete: %v %+v", err, res)
	}
	if got := scalar[bool](t, st, `SELECT run_after <= now() FROM {schema}.runs WHERE id = $1`, leases[1].RunID); !got {
		t.Error("the waiter was not woken by the release")
	}
	if got := scalar[string](t, st, `SELECT in_use || ' ' || (SELECT count(*) FROM {schema}.attempts WHERE hold_key IS NOT NULL)
		FROM {schema}.flow_keys WHERE downstream = 'one'`); got != "0 0" {
		t.Errorf("count and holders after the release: %s, want 0 0", got)
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

// A key's count admits takes while it stays within the limit; a limit
// lowered below it denies until enough are given back; a holder whose
// lease moved on is taken away by the recount of a take that found no
// room, and its late end gives nothing back.
func TestCommit_AKeysCountStaysWithinTheLimit(t *testing.T) {
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
	count := func() string {
		return scalar[string](t, st, `SELECT in_use || ' ' || (SELECT count(*) FROM {schema}.attempts WHERE hold_key IS NOT NULL)
			FROM {schema}.flow_keys WHERE downstream = 'pool'`)
	}
	for _, r := range take(leases[0], leases[1]) {
		if r.Err != nil || r.Denied != nil {
			t.Fatalf("first takes: %+v", r)
		}
	}
	if got := count(); got != "2 2" {
		t.Errorf("after 2 takes: count and holders %s, want 2 2", got)
	}
	res := take(leases[2], leases[3], leases[4], leases[5])
	for i, r := range res {
		if want := i < 3; r.Err != nil || (r.Denied == nil) != want {
			t.Errorf("take %d of 4 with 3 left: %+v, admitted want %v", i, r, want)
		}
	}
	if got := count(); got != "5 5" {
		t.Errorf("at the limit: count and holders %s, want 5 5", got)
	}
	// Lowered to 2, with 5 held: denied until 3 are given back.
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.downstreams SET concurrency = 2 WHERE name = 'pool'`, st.Schema())); err != nil {
		t.Fatal(err)
	}
	end := func(l store.Lease) store.Write {
		return store.Write{Lease: l, StepDone: &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)},
			Gives: []store.FlowGive{{Downstream: "pool", Outcome: store.GiveOK, Step: 1, Attempt: 1}}}
	}
	gives := []store.Write{end(leases[0]), end(leases[1]), end(leases[2])}
	if res, err := st.Commit(t.Context(), st.Pool(), gives); err != nil || res[0].Err != nil {
		t.Fatalf("gives: %v %+v", err, res)
	}
	if got := count(); got != "2 2" {
		t.Errorf("after 3 gives: count and holders %s, want 2 2", got)
	}
	if r := take(leases[6])[0]; r.Err != nil || r.Denied == nil || r.Denied.Cause != "concurrency" {
		t.Errorf("a take with 2 held at a limit of 2: %+v, want denied", r)
	}
	// The holder of leases[4] loses its lease (another epoch): the next
	// take's recount takes it away, and with one held, admits.
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.runs SET epoch = epoch + 1 WHERE id = $1`, st.Schema()), leases[4].RunID); err != nil {
		t.Fatal(err)
	}
	if r := take(leases[7])[0]; r.Err != nil || r.Denied != nil {
		t.Errorf("a take with 1 held at a limit of 2: %+v, want admitted", r)
	}
	if got := count(); got != "2 2" {
		t.Errorf("after the dead holder went and a take: count and holders %s, want 2 2", got)
	}
	// The dead holder's late end is refused, and gives nothing back.
	if res, err := st.Commit(t.Context(), st.Pool(), []store.Write{end(leases[4])}); err != nil || !errors.Is(res[0].Err, store.ErrLeaseLost) {
		t.Fatalf("the dead holder's end: %v %+v, want its lease lost", err, res)
	}
	if got := count(); got != "2 2" {
		t.Errorf("after the dead holder's late end: count and holders %s, want 2 2", got)
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

// A give counts for its key once, and only in the write that ends its
// attempt: a give whose attempt its write does not end (a lease lost, a
// write that carries no end) counts nothing, and neither does the same
// write sent again after its commit.
func TestCommit_AGiveCountsOnlyWithTheEndOfItsAttempt(t *testing.T) {
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
	for i, r := range res {
		if r.Err != nil || r.Denied != nil {
			t.Fatalf("take %d: %+v, want admitted", i, r)
		}
	}
	count := func() int64 {
		return scalar[int64](t, st, `SELECT in_use FROM {schema}.flow_keys WHERE downstream = 'pool'`)
	}
	commit := func(w store.Write) {
		t.Helper()
		if r, err := st.Commit(t.Context(), st.Pool(), []store.Write{w}); err != nil || r[0].Err != nil {
			t.Fatalf("give: %v %+v", err, r)
		}
	}
	give := []store.FlowGive{{Downstream: "pool", Outcome: store.GiveOK, Step: 1, Attempt: 1}}
	commit(store.Write{Lease: leases[0], Gives: give}) // no end
	if n := count(); n != 3 {
		t.Fatalf("after a give without its attempt's end: count %d, want 3", n)
	}
	end := store.Write{Lease: leases[0], StepDone: &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)}, Gives: give}
	commit(end)
	end.Again = true
	commit(end)
	if n := count(); n != 2 {
		t.Fatalf("after a give with its end, sent twice: count %d, want 2", n)
	}
	delay := time.Second
	commit(store.Write{Lease: leases[2], EndAttempt: &store.AttemptEnd{Step: 1, Attempt: 1, Status: store.AttemptFailed, ErrorMessage: "503", Delay: &delay},
		Gives: []store.FlowGive{{Downstream: "pool", Outcome: store.GiveError, Step: 1, Attempt: 1}}})
	if n := count(); n != 1 {
		t.Fatalf("after a give with its attempt's failure: count %d, want 1", n)
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

// A worker of an earlier version, still running after migration 28, calls
// _flow with 16 arguments and writes no holder into its attempts: its
// takes hold slot rows instead, which recounts count and its gives delete,
// so that the limit holds across old and new workers.
func TestCommit_AnOlderWorkersTakesAndGivesKeepTheLimit(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	start := declarePool(t, st, 2)
	leases := claimN(t, st, 3)
	old := func(gives bool, l store.Lease) string {
		t.Helper()
		q := `SELECT coalesce(string_agg(coalesce(cause, 'admitted'), ','), '') FROM {schema}._flow(
			'{}', '{}', '{}', '{}', '{}', ARRAY[$1]::uuid[], ARRAY[$2]::bigint[], '{1}', '{1}', '{pool}', '{""}', '{f}', '{""}', 'old', false, NULL)`
		if gives {
			q = `SELECT coalesce(string_agg(coalesce(cause, 'admitted'), ','), '') FROM {schema}._flow(
				ARRAY[$1]::uuid[], ARRAY[$2]::bigint[], '{pool}', '{""}', '{ok}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', 'old', false, NULL)`
		}
		return scalar[string](t, st, q, leases[0].RunID, leases[0].Epoch)
	}
	count := func() string {
		return scalar[string](t, st, `SELECT in_use || ' ' || (SELECT count(*) FROM {schema}.flow_slots WHERE run_id IS NOT NULL)
			FROM {schema}.flow_keys WHERE downstream = 'pool'`)
	}
	if got := old(false, leases[0]); got != "admitted" {
		t.Fatalf("an older worker's take: %s", got)
	}
	if got := count(); got != "1 1" {
		t.Fatalf("after an older worker's take: count and slot rows %s, want 1 1", got)
	}
	if res, err := st.Commit(t.Context(), st.Pool(), []store.Write{start(leases[1], 1, store.FlowTake{Downstream: "pool"})}); err != nil || res[0].Denied != nil {
		t.Fatalf("a take beside it: %v %+v", err, res)
	}
	// A count set too high (as a dead worker leaves it): the recount of the
	// next take counts the older worker's holder, alive, and denies it.
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.flow_keys SET in_use = 2`, st.Schema())); err != nil {
		t.Fatal(err)
	}
	res, err := st.Commit(t.Context(), st.Pool(), []store.Write{start(leases[2], 1, store.FlowTake{Downstream: "pool"})})
	if err != nil {
		t.Fatal(err)
	}
	if got := count(); got != "2 1" || res[0].Denied == nil {
		t.Fatalf("a take with 2 held at a limit of 2: count and slot rows %s, take %+v; want 2 1, denied", got, res[0])
	}
	if got := old(true, leases[0]); got != "" {
		t.Fatalf("an older worker's give answered %q", got)
	}
	if got := count(); got != "1 0" {
		t.Fatalf("after the older worker's give: count and slot rows %s, want 1 0", got)
	}
	_ = old(true, leases[0]) // again: nothing more
	if got := count(); got != "1 0" {
		t.Fatalf("after the older worker's give, twice: count and slot rows %s, want 1 0", got)
	}
}
