package store_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// TestFlow_EveryStatementFindsItsRowsByKey: the statements inside _flow
// read only the rows of their batch, each through its key, in the plans a
// worker's session caches for them (generic: a commit's planner settings),
// and none is JIT-compiled on a server that compiles everything
// (jit_above_cost 0), with a key of 5,000 slots, 48 of them held:
//
//   - young: every table analyzed while empty (on such tables two
//     statements of migration 16 once read every slot of the key for each
//     row of the batch: a slot = ANY and a top slot left as filters, a
//     give's holder looked up by the key alone);
//   - history: 200,000 finished runs and their attempts, and a wait ended
//     on the downstream for about a quarter of them, analyzed with the flow
//     tables as they are before the batch (TENURE_FLOW_PLAN_HISTORY sets
//     another count, for a run by hand: 1000000 takes about 25 s).
//
// The batches: one that _flow_batch answers (errors for a breaker), the
// common one that _flow_commit's fast path does (migration 29), and those
// that limits bind.
//
// Every nested statement's plan is read as PostgreSQL runs it, from
// auto_explain, with the rows each scan removed.
func TestFlow_EveryStatementFindsItsRowsByKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		history int
	}{{"young", 0}, {"history", planHistory(t)}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkFlowPlans(t, c.history)
		})
	}
}

// planHistory is the history's count of finished runs: 200,000, or
// TENURE_FLOW_PLAN_HISTORY.
func planHistory(t *testing.T) int {
	s := os.Getenv("TENURE_FLOW_PLAN_HISTORY")
	if s == "" {
		return 200_000
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("TENURE_FLOW_PLAN_HISTORY=%q: want a count of runs, at least 1", s)
	}
	return n
}

func checkFlowPlans(t *testing.T, history int) {
	st := newStore(t)
	ctx := t.Context()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, replaceSchema(q, st.Schema()), args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.DeclareDownstream(ctx, "api", []byte(`{"concurrency": 10000, "breaker_error_ratio": 0.5}`), "w", "attempt"); err != nil {
		t.Fatal(err)
	}
	if history > 0 {
		exec(fmt.Sprintf(`
			INSERT INTO {schema}.runs (id, workflow, input, status, output, started_at, finished_at)
			SELECT gen_random_uuid(), 'wf', '{}', 'completed', '1', now(), now() FROM generate_series(1, %d);
			INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, ended_at, epoch, worker)
			SELECT id, 1, 1, 'a', 'succeeded', now(), 1, 'w' FROM {schema}.runs;
			INSERT INTO {schema}.throttles (run_id, step, downstream, key, cause, attempt, began_at, ended_at)
			SELECT id, 1, 'api', '', 'concurrency', 1, now() - interval '1 minute', now() - interval '50 seconds'
			FROM {schema}.runs TABLESAMPLE BERNOULLI (25)`, history))
	}
	exec(`ANALYZE {schema}.runs, {schema}.attempts, {schema}.flow_slots, {schema}.flow_keys, {schema}.downstream_state,
		{schema}.flow_waiters, {schema}.throttles`)
	const held = 48
	leases := claimN(t, st, 2*held)
	var ids []string
	var epochs []int64
	for _, l := range leases[:held] {
		ids, epochs = append(ids, l.RunID.String()), append(epochs, l.Epoch)
	}
	exec(`INSERT INTO {schema}.flow_slots (downstream, key, slot) SELECT 'api', '', g FROM generate_series(1, 5000) AS g`)
	exec(`UPDATE {schema}.flow_slots s SET run_id = l.id, epoch = l.epoch, step = 1, taken_at = now()
		FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS l(id, epoch, n)
		WHERE s.downstream = 'api' AND s.key = '' AND s.slot = l.n`, ids, epochs)

	cfg := st.Pool().Config().ConnConfig.Copy()
	var mu sync.Mutex
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		plans = append(plans, n.Message)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;
		SET auto_explain.log_nested_statements = on; SET auto_explain.log_analyze = on; SET auto_explain.log_timing = off;
		SET auto_explain.log_level = notice;
		SET jit = on; SET jit_above_cost = 0; SET jit_inline_above_cost = 0; SET jit_optimize_above_cost = 0`); err != nil {
		t.Fatalf("auto_explain, which this test reads plans with (PostgreSQL's contrib): %v", err)
	}

	// One batch: the holders give back (a quarter of them in an error; half
	// of them naming their slot, as an attempt's give does, the others not,
	// as a run's), as many others take.
	pol, _ := json.Marshal(policy.Default())
	var writes []store.Write
	for i, l := range leases {
		w := store.Write{Lease: l}
		if i < held {
			o := store.GiveOK
			if i%4 == 1 {
				o = store.GiveError
			}
			w.Gives = []store.FlowGive{{Downstream: "api", Outcome: o}}
			if i%2 == 0 {
				w.Gives[0].Slot = int32(i + 1)
			}
		} else {
			w.StartAttempt = &store.AttemptStart{Step: 1, Attempt: 1, Activity: "a", Policy: pol, Worker: "w",
				Take: &store.FlowTake{Downstream: "api"}}
		}
		writes = append(writes, w)
	}
	res, err := st.Commit(ctx, conn, writes)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Denied != nil {
			t.Fatalf("write %d: %+v", i, r)
		}
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.flow_slots WHERE run_id IS NOT NULL`); n != held {
		t.Fatalf("%d slots held after %d gives and %d takes, want %d", n, held, held, held)
	}
	// The common batch (migration 29's fast path): the takers end, with
	// no error for the breaker to count, as others take, under a limit far
	// from binding.
	var common []store.Write
	for i, l := range leases[held:] {
		common = append(common, store.Write{Lease: l, EndAttempt: &store.AttemptEnd{Step: 1, Attempt: 1, Status: "failed", ErrorMessage: "x"},
			Gives: []store.FlowGive{{Downstream: "api", Outcome: []string{store.GiveOK, store.GiveNone}[i%2], Step: 1, Attempt: 1}}})
	}
	for _, l := range leases[8:held] {
		common = append(common, store.Write{Lease: l, StartAttempt: &store.AttemptStart{Step: 3, Attempt: 1, Activity: "a", Policy: pol, Worker: "w",
			Take: &store.FlowTake{Downstream: "api"}}})
	}
	mu.Lock()
	before := len(plans)
	mu.Unlock()
	if res, err := st.Commit(ctx, conn, common); err != nil {
		t.Fatal(err)
	} else {
		for i, r := range res {
			if r.Err != nil || r.Denied != nil {
				t.Fatalf("common batch, write %d: %+v", i, r)
			}
		}
	}
	mu.Lock()
	if !slices.ContainsFunc(plans[before:], func(p string) bool { return strings.Contains(p, "ks_downstreams") }) ||
		slices.ContainsFunc(plans[before:], func(p string) bool { return strings.Contains(p, "_flow_bulk") }) {
		t.Errorf("the common batch did not take _flow_commit's fast path")
	}
	mu.Unlock()

	// The sweep, as a claim's transaction runs it: with nothing waiting
	// (no lock), then with a waiter (the locks, the count of holders).
	sweep := func() {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		for _, q := range []string{`CALL {schema}.planner('write')`, `SELECT * FROM {schema}.flow_sweep(ARRAY['api'])`,
			`SELECT * FROM {schema}._flow_sweep(ARRAY['api'], false)`} {
			if _, err := tx.Exec(ctx, replaceSchema(q, st.Schema())); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sweep()
	exec(`INSERT INTO {schema}.flow_waiters (downstream, key, cause, run_id, since) VALUES ('api', '', 'concurrency', $1, now())`, leases[0].RunID)
	sweep()

	// A batch that limits bind: of three takes of a key with one slot, and
	// of three under a rate of one an hour, one each is admitted and the
	// others denied, their runs parked (the runs, the throttles, the
	// waiters); then the same batch again, as a write repeated after a lost
	// COMMIT is, which finds them parked and denies them again.
	for _, d := range []struct{ name, limits string }{
		{"tight", `{"concurrency": 1}`},
		{"rated", `{"rate": 1, "rate_interval_ms": 3600000, "burst": 1}`},
	} {
		if err := st.DeclareDownstream(ctx, d.name, []byte(d.limits), "w", "attempt"); err != nil {
			t.Fatal(err)
		}
	}
	var binds []store.Write
	for i, l := range leases[1:7] {
		ds := "tight"
		if i >= 3 {
			ds = "rated"
		}
		binds = append(binds, store.Write{Lease: l, StartAttempt: &store.AttemptStart{Step: 2, Attempt: 1, Activity: "a", Policy: pol, Worker: "w",
			Take: &store.FlowTake{Downstream: ds}}})
	}
	for try := range 2 {
		res, err := st.Commit(ctx, conn, binds)
		if err != nil {
			t.Fatal(err)
		}
		denied := 0
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("try %d, write %d: %+v", try, i, r)
			}
			if r.Denied != nil {
				denied++
			}
		}
		if denied != 4 {
			t.Fatalf("try %d: %d of 6 takes denied, want 4: %+v", try, denied, res)
		}
		for i := range binds {
			binds[i].Again = true
		}
	}

	mu.Lock()
	defer mu.Unlock()
	nested := 0
	for _, p := range plans {
		if !strings.Contains(p, "plan:") {
			continue
		}
		if strings.Contains(p, "flow_") || strings.Contains(p, "downstream_state") {
			nested++
		}
		for _, bad := range wideFlowAccess(p) {
			t.Errorf("%s in the plan of\n%s", bad, p)
		}
		if strings.Contains(p, "JIT:") {
			t.Errorf("JIT-compiled at jit_above_cost = 0 under the commit's planner settings:\n%s", p)
		}
	}
	q := pgx.Identifier{st.Schema()}.Sanitize()
	for _, want := range []string{"INSERT INTO " + q + ".throttles", "INSERT INTO " + q + ".flow_waiters", "JOIN " + q + ".throttles th"} {
		if !slices.ContainsFunc(plans, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no plan of %q read: the denials' statements went unchecked", want)
		}
	}
	if nested < 20 {
		t.Fatalf("%d plans of statements on the flow tables read, want every statement of _flow's (auto_explain's nested statements): %q", nested, plans)
	}
}

var (
	flowScan    = regexp.MustCompile(`(Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan)( Backward)?( using \S+)? on (flow_slots|flow_keys|flow_waiters|downstream_state|throttles|runs|attempts)\b`)
	flowSeqScan = regexp.MustCompile(`Seq Scan on (flow_slots|flow_keys|flow_waiters|throttles|runs|attempts(_[0-9a-z]+)?)\b`)
	removed     = regexp.MustCompile(`Rows Removed by (Join )?Filter: (\d+)`)
)

// wideFlowAccess lists what in plan reads more than its batch's rows: a
// table read whole, an index scan with no Index Cond, and a scan of a flow
// table (or a join) that filtered out more rows than a batch's handful.
func wideFlowAccess(plan string) []string {
	var bad []string
	lines := strings.Split(plan, "\n")
	node := ""
	for i, l := range lines {
		if strings.Contains(l, "->") || strings.Contains(l, "(cost=") {
			node = strings.TrimSpace(l)
		}
		switch {
		case flowSeqScan.MatchString(l):
			bad = append(bad, strings.TrimSpace(l))
		case flowScan.MatchString(l) && strings.Contains(l, "Index") &&
			(i+1 == len(lines) || !strings.Contains(lines[i+1], "Index Cond:")):
			bad = append(bad, strings.TrimSpace(l)+" (no Index Cond)")
		}
		if m := removed.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[2])
			if (m[1] != "" && n > 100) || (flowScan.MatchString(node) && n > 8) {
				bad = append(bad, node+": "+strings.TrimSpace(l))
			}
		}
	}
	return bad
}
