package store_test

import (
	"encoding/json"
	"regexp"
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
// on flow tables whose statistics were taken while they were empty, with a
// key of 5,000 slots, 48 of them held. On such tables two statements of
// migration 16 once read every slot of the key for each row of the batch
// (a slot = ANY and a top slot left as filters, a give's holder looked up
// by the key alone). Every nested statement's plan is read as PostgreSQL
// runs it, from auto_explain, with the rows each scan removed.
func TestFlow_EveryStatementFindsItsRowsByKey(t *testing.T) {
	t.Parallel()
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
	exec(`ANALYZE {schema}.flow_slots, {schema}.flow_keys, {schema}.downstream_state, {schema}.flow_waiters, {schema}.throttles`)
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
		SET auto_explain.log_level = notice`); err != nil {
		t.Fatalf("auto_explain, which this test reads plans with (PostgreSQL's contrib): %v", err)
	}

	// One batch: the holders give back (a quarter of them in an error), as many
	// others take.
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
	}
	if nested < 10 {
		t.Fatalf("%d plans of statements on the flow tables read, want every statement of _flow's (auto_explain's nested statements): %q", nested, plans)
	}
}

var (
	flowScan    = regexp.MustCompile(`(Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan)( Backward)?( using \S+)? on (flow_slots|flow_keys|flow_waiters|downstream_state|throttles|runs|attempts)\b`)
	flowSeqScan = regexp.MustCompile(`Seq Scan on (flow_slots|flow_keys|flow_waiters|throttles|runs|attempts)\b`)
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
