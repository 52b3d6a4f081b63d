package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// flowPaths commits writes in a transaction of its own and says which of
// _flow_commit's paths it took: fast (three statements) or _flow_batch's.
// The calls are PostgreSQL's own count (track_functions, set for this
// transaction; pg_stat_xact_user_functions, before and after).
func flowPaths(t *testing.T, st *store.Store, writes []store.Write) (res []store.WriteResult, slow bool, at, began time.Time) {
	t.Helper()
	ctx := t.Context()
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := tx.QueryRow(ctx, `SELECT set_config('track_functions', 'pl', true), now()`).Scan(new(string), &began); err != nil {
		t.Fatalf("track_functions (a superuser's setting, as the tests' database user is): %v", err)
	}
	calls := func() (commits, batches int64) {
		t.Helper()
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(calls) FILTER (WHERE funcname = '_flow_commit'), 0),
			coalesce(sum(calls) FILTER (WHERE funcname = '_flow_batch'), 0)
			FROM pg_stat_xact_user_functions WHERE schemaname = $1`, st.Schema()).Scan(&commits, &batches); err != nil {
			t.Fatal(err)
		}
		return commits, batches
	}
	c0, b0 := calls() // (the backend's calls not yet reported, this transaction's among them)
	if res, err = st.Commit(ctx, tx, writes); err != nil {
		t.Fatal(err)
	}
	commits, batches := calls()
	commits, batches = commits-c0, batches-b0
	if commits != 1 {
		t.Fatalf("_flow_commit called %d times by one commit, want 1", commits)
	}
	var admittedAt *time.Time
	if err := tx.QueryRow(ctx, `SELECT nullif(current_setting('tenure.admitted_at', true), '')::timestamptz`).Scan(&admittedAt); err != nil {
		t.Fatal(err)
	}
	if admittedAt != nil {
		at = *admittedAt
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return res, batches > 0, at, began
}

// The common batch of a limited downstream, attempts ending and others
// starting under a limit far from binding, with no breaker open, no rate,
// no retry charged to a budget, is counted by _flow_commit's three
// statements, and counted as _flow_batch counts it: the key's count, the
// admissions, the calls and errors and the breaker's window and streak,
// each attempt's start at its admission.
func TestCommit_TheCommonBatchTakesTheFastPath(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	if err := st.DeclareDownstream(t.Context(), "api", []byte(`{"concurrency": 100}`), "w", "attempt"); err != nil {
		t.Fatal(err)
	}
	leases := claimN(t, st, 12)
	pol, _ := json.Marshal(policy.Default())
	start := func(l store.Lease, key string) store.Write {
		return store.Write{Lease: l, StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "a", Policy: pol, Worker: "w",
			Take: &store.FlowTake{Downstream: "api", Key: key}}}
	}
	var first []store.Write
	for i, l := range leases[:6] {
		first = append(first, start(l, []string{"a", "b"}[i%2]))
	}
	// A key's first use inserts its row: _flow_batch's, before any lock.
	if res, slow, _, _ := flowPaths(t, st, first); !slow || res[0].Err != nil || res[0].Denied != nil {
		t.Fatalf("the keys' first takes: slow path %v, %+v; want _flow_batch's, admitted", slow, res[0])
	}
	// Then: three of the six end (ok, error, ok on key a; ok on b), three
	// others take (a, b, b).
	end := func(l store.Lease, key, outcome string) store.Write {
		return store.Write{Lease: l, StepDone: &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)},
			CompleteRun: &store.RunOutput{Output: []byte(`1`)},
			Gives:       []store.FlowGive{{Downstream: "api", Key: key, Outcome: outcome, Step: 1, Attempt: 1}}}
	}
	second := []store.Write{end(leases[0], "a", store.GiveOK), end(leases[2], "a", store.GiveError), end(leases[4], "a", store.GiveOK),
		end(leases[1], "b", store.GiveError), start(leases[6], "a"), start(leases[7], "b"), start(leases[8], "b")}
	second[1].CompleteRun, second[1].StepDone = nil, nil
	second[1].EndAttempt = &store.AttemptEnd{Step: 1, Attempt: 1, Status: "failed", ErrorMessage: "503"}
	second[3].CompleteRun, second[3].StepDone = nil, nil
	second[3].EndAttempt = &store.AttemptEnd{Step: 1, Attempt: 1, Status: "failed", ErrorMessage: "503"}
	res, slow, at, began := flowPaths(t, st, second)
	if slow {
		t.Fatal("the common batch went to _flow_batch")
	}
	for i, r := range res {
		if r.Err != nil || r.Denied != nil {
			t.Fatalf("write %d: %+v", i, r)
		}
	}
	if at.Before(began) {
		t.Errorf("admitted at %v, before the transaction began (%v)", at, began)
	}
	// Key a: 3 held, 3 given, 1 taken; b: 3 held, 1 given, 2 taken.
	if got := scalar[string](t, st, `SELECT string_agg(key || '=' || in_use || '/' || (SELECT count(*) FROM {schema}.attempts a
			WHERE a.hold_downstream = 'api' AND a.hold_key = k.key AND a.status = 'running'), ' ' ORDER BY key)
		FROM {schema}.flow_keys k WHERE downstream = 'api'`); got != "a=1/1 b=4/4" {
		t.Errorf("counts/holders by key: %s, want a=1/1 b=4/4", got)
	}
	if got := scalar[string](t, st, `SELECT concat_ws(' ', admitted, retries, calls, errors, window_calls, window_errors, error_streak)
		FROM {schema}.downstream_state WHERE name = 'api'`); got != "9 0 4 2 4 2 1" {
		t.Errorf("admitted retries calls errors window_calls window_errors error_streak: %s, want 9 0 4 2 4 2 1", got)
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.attempts WHERE run_id = ANY ($1) AND started_at = $2`,
		[]any{leases[6].RunID, leases[7].RunID, leases[8].RunID}, at); n != 3 {
		t.Errorf("%d of the 3 attempts admitted start at their admission (%v)", n, at)
	}
}

// What the fast path cannot answer goes to _flow_batch whole: an error a
// breaker counts, a rate, a retry charged to a budget, a key without room
// for its takes, a repeat. A give that frees what a waiter needs wakes it
// on the fast path, and the woken run's take ends its wait.
func TestCommit_TheFastPathGivesWayToWhatItCannotDo(t *testing.T) {
	t.Parallel()
	pol, _ := json.Marshal(policy.Default())
	start := func(l store.Lease, ds string, attempt int, retry bool) store.Write {
		return store.Write{Lease: l, StartAttempt: &store.AttemptStart{Step: 1, Attempt: attempt, Activity: "a", Policy: pol, Worker: "w",
			Take: &store.FlowTake{Downstream: ds, Retry: retry}}}
	}
	giveBack := func(l store.Lease, ds, outcome string) store.Write {
		return store.Write{Lease: l, EndAttempt: &store.AttemptEnd{Step: 1, Attempt: 1, Status: "failed", ErrorMessage: "503"},
			Gives: []store.FlowGive{{Downstream: ds, Outcome: outcome, Step: 1, Attempt: 1}}}
	}
	for _, c := range []struct {
		name, limits string
		// held attempts are started before the batch; batch makes it from
		// the leases after them.
		held  int
		batch func(held, rest []store.Lease) []store.Write
	}{
		{"an error a breaker counts", `{"breaker_error_ratio": 0.5}`, 1, func(h, r []store.Lease) []store.Write {
			return []store.Write{giveBack(h[0], "d", store.GiveError)}
		}},
		{"a rate", `{"rate": 100, "rate_interval_ms": 1000, "burst": 10}`, 1, func(h, r []store.Lease) []store.Write {
			return []store.Write{start(r[0], "d", 1, false)}
		}},
		{"a retry charged to a budget", `{"retry_ratio": 0.2, "retry_per_s": 10}`, 1, func(h, r []store.Lease) []store.Write {
			return []store.Write{start(r[0], "d", 2, true)}
		}},
		{"a key without room", `{"concurrency": 2}`, 2, func(h, r []store.Lease) []store.Write {
			return []store.Write{start(r[0], "d", 1, false)}
		}},
		{"a repeat", `{"concurrency": 10}`, 1, func(h, r []store.Lease) []store.Write {
			w := start(r[0], "d", 1, false)
			w.Again = true
			return []store.Write{w}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := newStore(t)
			if err := st.DeclareDownstream(t.Context(), "d", []byte(c.limits), "w", "attempt"); err != nil {
				t.Fatal(err)
			}
			leases := claimN(t, st, c.held+1)
			var held []store.Write
			for _, l := range leases[:c.held] {
				held = append(held, start(l, "d", 1, false))
			}
			if _, err := st.Commit(t.Context(), st.Pool(), held); err != nil {
				t.Fatal(err)
			}
			if _, slow, _, _ := flowPaths(t, st, c.batch(leases[:c.held], leases[c.held:])); !slow {
				t.Errorf("%s: answered by the fast path", c.name)
			}
		})
	}

	t.Run("a waiter to wake", func(t *testing.T) {
		t.Parallel()
		st := newStore(t)
		if err := st.DeclareDownstream(t.Context(), "d", []byte(`{"concurrency": 1}`), "w", "attempt"); err != nil {
			t.Fatal(err)
		}
		leases := claimN(t, st, 2)
		res, err := st.Commit(t.Context(), st.Pool(), []store.Write{start(leases[0], "d", 1, false)})
		if err != nil || res[0].Denied != nil {
			t.Fatalf("the holder's take: %v %+v", err, res)
		}
		res, err = st.Commit(t.Context(), st.Pool(), []store.Write{start(leases[1], "d", 1, false)})
		if err != nil || res[0].Denied == nil {
			t.Fatalf("the waiter's take: %v %+v, want denied", err, res)
		}
		// The holder's end frees what the waiter waits for: the fast path
		// wakes it (a limit that binds is the common batch too).
		if _, slow, _, _ := flowPaths(t, st, []store.Write{giveBack(leases[0], "d", store.GiveOK)}); slow {
			t.Error("a give with a waiter to wake went to _flow_batch")
		}
		if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.flow_waiters`); n != 0 {
			t.Errorf("%d waiters left after the wake, want 0", n)
		}
		if got := scalar[bool](t, st, `SELECT run_after <= now() FROM {schema}.runs WHERE id = $1`, leases[1].RunID); !got {
			t.Error("the waiter was not woken")
		}
		// Woken and claimed again, its take is admitted by the fast path,
		// which ends its wait at the admission.
		queue := scalar[string](t, st, `SELECT queue FROM {schema}.runs WHERE id = $1`, leases[1].RunID)
		claimed, err := st.Claim(t.Context(), []string{"wf"}, []string{queue}, 1, "w", time.Minute)
		if err != nil || len(claimed) != 1 || claimed[0].ID != leases[1].RunID {
			t.Fatalf("claim of the woken run: %v %+v", err, claimed)
		}
		l := store.Lease{RunID: claimed[0].ID, Epoch: claimed[0].Epoch}
		res, slow, at, _ := flowPaths(t, st, []store.Write{start(l, "d", 1, false)})
		if slow || res[0].Err != nil || res[0].Denied != nil {
			t.Fatalf("the woken run's take: slow path %v, %+v; want the fast path, admitted", slow, res[0])
		}
		if got := scalar[string](t, st, `SELECT (ended_at = $2)::text || ' ' || attempt || ' ' || denials FROM {schema}.throttles
			WHERE run_id = $1`, l.RunID, at); got != "true 1 1" {
			t.Errorf("the wait (ended at its admission, attempt, denials): %s, want true 1 1", got)
		}
	})
}

// The fast path counts what _flow_batch counts. The same batches go to two
// schemas, one whose _flow_commit always hands them to _flow_batch: the
// keys' counts, the downstream's admissions, retries, calls, errors, the
// breaker's window and streak, and the attempts' holders come out the
// same, and the first schema took the fast path for every batch after the
// keys' first use.
func TestCommit_TheFastPathCountsAsTheSlowPathDoes(t *testing.T) {
	t.Parallel()
	pol, _ := json.Marshal(policy.Default())
	run := func(slowOnly bool) (state, keys, holders string, fast int) {
		st := newStore(t)
		ctx := t.Context()
		if err := st.DeclareDownstream(ctx, "api", []byte(`{"concurrency": 100}`), "w", "attempt"); err != nil {
			t.Fatal(err)
		}
		if slowOnly {
			withoutFastPath(t, st)
		}
		leases := claimN(t, st, 10)
		key := func(i int) string { return []string{"a", "b"}[i%2] }
		take := func(i int, retry bool) store.Write {
			return store.Write{Lease: leases[i], StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "a", Policy: pol,
				Worker: "w", Take: &store.FlowTake{Downstream: "api", Key: key(i), Retry: retry}}}
		}
		end := func(i int, give string) store.Write {
			w := store.Write{Lease: leases[i], Gives: []store.FlowGive{{Downstream: "api", Key: key(i), Outcome: give, Step: 1, Attempt: 1}}}
			if give == store.GiveOK {
				w.StepDone, w.CompleteRun = &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)}, &store.RunOutput{Output: []byte(`1`)}
			} else {
				w.EndAttempt = &store.AttemptEnd{Step: 1, Attempt: 1, Status: "failed", ErrorMessage: "503"}
			}
			return w
		}
		batches := [][]store.Write{
			{take(0, false), take(1, false), take(2, false), take(3, false), take(4, false), take(5, false)},
			{end(0, store.GiveOK), end(1, store.GiveError), end(2, store.GiveNone), end(3, store.GiveError), take(6, false), take(7, true)},
			{end(4, store.GiveError), end(5, store.GiveOK), end(6, store.GiveError), take(8, false), take(9, false)},
		}
		for i, b := range batches {
			res, slow, _, _ := flowPaths(t, st, b)
			for j, r := range res {
				if r.Err != nil || r.Denied != nil {
					t.Fatalf("batch %d, write %d: %+v", i, j, r)
				}
			}
			if !slow {
				fast++
			}
		}
		state = scalar[string](t, st, `SELECT concat_ws(' ', admitted, retries, calls, errors, window_calls, window_errors, error_streak,
			denied_concurrency, denied_rate, denied_breaker, denied_budget, breaker) FROM {schema}.downstream_state WHERE name = 'api'`)
		keys = scalar[string](t, st, `SELECT string_agg(key || '=' || in_use, ' ' ORDER BY key) FROM {schema}.flow_keys WHERE downstream = 'api'`)
		var ids []any
		for _, l := range leases {
			ids = append(ids, l.RunID)
		}
		holders = scalar[string](t, st, `SELECT string_agg(concat_ws(':', x.n, a.status, a.hold_downstream, a.hold_key), ' ' ORDER BY x.n)
			FROM unnest($1::uuid[]) WITH ORDINALITY AS x(id, n) JOIN {schema}.attempts a ON a.run_id = x.id`, ids)
		return state, keys, holders, fast
	}
	fs, fk, fh, fast := run(false)
	ss, sk, sh, slowFast := run(true)
	if fast != 2 || slowFast != 0 {
		t.Fatalf("batches on the fast path: %d and %d (the schema without it), want 2 and 0", fast, slowFast)
	}
	for _, c := range [][3]string{{"the downstream's state", fs, ss}, {"the keys' counts", fk, sk}, {"the attempts' holders", fh, sh}} {
		if c[1] != c[2] {
			t.Errorf("%s: fast path %q, _flow_batch %q", c[0], c[1], c[2])
		}
	}
	t.Logf("state %s; keys %s", fs, fk)
}

// withoutFastPath makes st's _flow_commit hand every batch to _flow_batch.
func withoutFastPath(t *testing.T, st *store.Store) {
	t.Helper()
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`CREATE OR REPLACE FUNCTION {schema}._flow_commit(
			give_runs uuid[], give_epochs bigint[], give_downstreams text[], give_keys text[], give_outcomes text[],
			take_runs uuid[], take_epochs bigint[], take_steps integer[], take_attempts integer[], take_downstreams text[],
			take_keys text[], take_retries boolean[], take_policies text[], by text, again boolean,
			give_slots integer[], give_steps integer[], give_attempts integer[],
			fast boolean, ds text[], ds_takes integer[], ds_retries integer[], ds_calls integer[], ds_errors integer[],
			ds_tails integer[], ks_downstreams text[], ks_keys text[], ks_takes integer[], wake_for text)
			RETURNS TABLE (run_id uuid, epoch bigint, cause text, wait_ms float8, slot integer)
			LANGUAGE plpgsql AS $$ BEGIN RETURN QUERY SELECT * FROM {schema}._flow_batch($1, $2, $3, $4, $5, $6, $7, $8, $9,
			$10, $11, $12, $13, $14, $15, $16, $17, $18); END $$`, st.Schema())); err != nil {
		t.Fatal(err)
	}
}

// A limit that binds: its denials park runs, a give wakes the oldest
// waiter, the woken run's take ends its wait. The fast path, which now
// answers the wake and the take, leaves what _flow_batch leaves: the
// key's count, the downstream's state, the waiters, the runs woken, the
// waits open and ended.
func TestCommit_TheFastPathWakesAsTheSlowPathDoes(t *testing.T) {
	t.Parallel()
	pol, _ := json.Marshal(policy.Default())
	run := func(slowOnly bool) (got []string, fast int) {
		st := newStore(t)
		ctx := t.Context()
		if err := st.DeclareDownstream(ctx, "api", []byte(`{"concurrency": 2}`), "w", "attempt"); err != nil {
			t.Fatal(err)
		}
		if slowOnly {
			withoutFastPath(t, st)
		}
		leases := claimN(t, st, 5)
		take := func(l store.Lease) store.Write {
			return store.Write{Lease: l, StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "a", Policy: pol,
				Worker: "w", Take: &store.FlowTake{Downstream: "api"}}}
		}
		end := func(l store.Lease) store.Write {
			return store.Write{Lease: l, StepDone: &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)},
				CompleteRun: &store.RunOutput{Output: []byte(`1`)},
				Gives:       []store.FlowGive{{Downstream: "api", Outcome: store.GiveOK, Step: 1, Attempt: 1}}}
		}
		commit := func(what string, writes []store.Write, denied int) {
			t.Helper()
			res, slow, _, _ := flowPaths(t, st, writes)
			n := 0
			for _, r := range res {
				if r.Err != nil {
					t.Fatalf("%s: %v", what, r.Err)
				}
				if r.Denied != nil {
					n++
				}
			}
			if n != denied {
				t.Fatalf("%s: %d denied, want %d", what, n, denied)
			}
			if !slow {
				fast++
			}
		}
		var ids []any
		for _, l := range leases {
			ids = append(ids, l.RunID)
		}
		snapshot := func() string {
			return scalar[string](t, st, `SELECT concat_ws(' | ',
				(SELECT concat_ws(' ', admitted, calls, errors, denied_concurrency) FROM {schema}.downstream_state WHERE name = 'api'),
				(SELECT string_agg(key || '=' || in_use, ' ' ORDER BY key) FROM {schema}.flow_keys WHERE downstream = 'api'),
				(SELECT string_agg(x.n::text, ' ' ORDER BY w.since, w.id) FROM {schema}.flow_waiters w
				 JOIN unnest($1::uuid[]) WITH ORDINALITY AS x(id, n) ON x.id = w.run_id),
				(SELECT string_agg(concat_ws(':', x.n, r.status, r.run_after <= now(), r.waiting_for), ' ' ORDER BY x.n)
				 FROM unnest($1::uuid[]) WITH ORDINALITY AS x(id, n) JOIN {schema}.runs r ON r.id = x.id),
				(SELECT string_agg(concat_ws(':', x.n, th.ended_at IS NULL, th.attempt, th.denials), ' ' ORDER BY x.n)
				 FROM unnest($1::uuid[]) WITH ORDINALITY AS x(id, n) JOIN {schema}.throttles th ON th.run_id = x.id))`, ids)
		}
		commit("two takes fill the limit", []store.Write{take(leases[0]), take(leases[1])}, 0)
		commit("three takes wait", []store.Write{take(leases[2]), take(leases[3]), take(leases[4])}, 3)
		got = append(got, snapshot())
		commit("an end wakes the oldest waiter", []store.Write{end(leases[0])}, 0)
		got = append(got, snapshot())
		woken, err := st.Claim(ctx, []string{"wf"}, []string{scalar[string](t, st, `SELECT queue FROM {schema}.runs WHERE id = $1`, leases[2].RunID)}, 5, "w", time.Minute)
		if err != nil || len(woken) != 1 || woken[0].ID != leases[2].RunID {
			t.Fatalf("the claim after the wake: %v %+v, want the oldest waiter", err, woken)
		}
		commit("the woken run takes, the other holder ends", []store.Write{take(store.Lease{RunID: woken[0].ID, Epoch: woken[0].Epoch}), end(leases[1])}, 0)
		got = append(got, snapshot())
		return got, fast
	}
	fastGot, fast := run(false)
	slowGot, slowFast := run(true)
	if fast != 2 || slowFast != 0 {
		t.Errorf("batches on the fast path: %d and %d (the schema without it), want 2 (the wake; the woken take and an end) and 0", fast, slowFast)
	}
	for i := range fastGot {
		if fastGot[i] != slowGot[i] {
			t.Errorf("after batch %d:\n fast path  %s\n _flow_batch %s", i+2, fastGot[i], slowGot[i])
		}
	}
	t.Logf("%q", fastGot)
}

// A sweep counts the steps waiting only when asked (a lookup per step
// waiting); otherwise it says 0 when none waits, and nothing when some do.
func TestFlowSweep_CountsTheWaitsWhenAsked(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	if err := st.DeclareDownstream(ctx, "api", []byte(`{"concurrency": 1}`), "w", "attempt"); err != nil {
		t.Fatal(err)
	}
	sweep := func(counts bool) store.DownstreamState {
		t.Helper()
		s, err := st.FlowSweep(ctx, []string{"api"}, counts)
		if err != nil || len(s) != 1 {
			t.Fatalf("sweep: %v %+v", err, s)
		}
		return s[0]
	}
	if s := sweep(false); !s.Counted || s.Waiting != 0 {
		t.Errorf("nothing waiting, not counted: %+v, want 0 known", s)
	}
	pol, _ := json.Marshal(policy.Default())
	leases := claimN(t, st, 3)
	for i, l := range leases {
		res, err := st.Commit(ctx, st.Pool(), []store.Write{{Lease: l, StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1,
			Activity: "a", Policy: pol, Worker: "w", Take: &store.FlowTake{Downstream: "api"}}}})
		if err != nil || (res[0].Denied != nil) != (i > 0) {
			t.Fatalf("take %d: %v %+v", i, err, res)
		}
	}
	if s := sweep(false); s.Counted {
		t.Errorf("two waiting, not counted: %+v, want not known", s)
	}
	if s := sweep(true); !s.Counted || s.Waiting != 2 || s.InUse != 1 {
		t.Errorf("two waiting, counted: %+v, want 2 waiting, 1 in use", s)
	}
}
