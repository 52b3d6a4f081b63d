package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/chaos/fleet"
	"github.com/tenurehq/tenure/internal/chaos/invariant"
	"github.com/tenurehq/tenure/internal/chaos/workload"
)

// TestFlow_TheFlowRulesHoldAndSeeWhatBreaksThem runs Limited steps of one
// key through two workers until the downstream's concurrency limit holds
// them back, checks that the flow rules hold, then breaks each rule in the
// tables and checks that the checker names it: a limit lowered below what
// ran at once, an attempt that ended still holding capacity, a count
// below the live holders, a waiter left behind.
func TestFlow_TheFlowRulesHoldAndSeeWhatBreaksThem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("flow-1")
	e.worker("flow-2")
	var ids []uuid.UUID
	for range 6 {
		ids = append(ids, e.start(workload.Step{Kind: workload.Limited, SleepMS: 150}))
	}
	for _, id := range ids {
		e.completed(id)
	}
	opts := invariant.FlowOptions{Calls: workload.Calls(), Invocations: workload.LedgerTable}
	rep := e.checkFlow(opts)
	if !rep.OK() || len(rep.Downstreams) != 1 {
		t.Fatalf("flow rules on a clean run: %v", rep.Violations)
	}
	d := rep.Downstreams[0]
	if d.Attempts != 6 || d.Peak != workload.DownstreamConcurrency || d.Throttles["concurrency"] == 0 {
		t.Fatalf("6 runs at concurrency %d: %d attempts, peak %d, throttles %v; want 6, the limit, some", workload.DownstreamConcurrency, d.Attempts, d.Peak, d.Throttles)
	}

	// What ran at once is over a limit of 1.
	e.exec(`UPDATE {schema}.downstreams SET concurrency = 1 WHERE name = $1`, workload.DownstreamName)
	e.wantViolation(opts, invariant.NeverOverLimit, "attempts in flight, limit 1")
	e.exec(`UPDATE {schema}.downstreams SET concurrency = $2 WHERE name = $1`, workload.DownstreamName, workload.DownstreamConcurrency)

	// An attempt that ended with its hold (its end did not give it back),
	// and a count below its live holders.
	e.exec(`UPDATE {schema}.attempts SET hold_downstream = $2, hold_key = '' WHERE run_id = $1`, ids[0], workload.DownstreamName)
	e.wantViolation(opts, invariant.NoCapacityLeaked, "an attempt that ended still holding")
	e.exec(`UPDATE {schema}.attempts SET hold_downstream = NULL, hold_key = NULL WHERE run_id = $1`, ids[0])
	e.exec(`UPDATE {schema}.runs SET status = 'running', lease_expires_at = now() + interval '1 hour' WHERE id = $1`, ids[0])
	e.exec(`UPDATE {schema}.attempts SET status = 'running', ended_at = NULL, hold_downstream = $2, hold_key = '' WHERE run_id = $1`, ids[0], workload.DownstreamName)
	e.exec(`UPDATE {schema}.flow_keys SET in_use = 0 WHERE downstream = $1`, workload.DownstreamName)
	e.wantViolation(opts, invariant.NoCapacityLeaked, "a key counting fewer takes than its live holders")
	e.exec(`UPDATE {schema}.attempts SET status = 'succeeded', ended_at = now(), hold_downstream = NULL, hold_key = NULL WHERE run_id = $1`, ids[0])
	e.exec(`UPDATE {schema}.runs SET status = 'completed', lease_expires_at = NULL WHERE id = $1`, ids[0])

	// A waiter left for a run that no longer waits.
	e.exec(`INSERT INTO {schema}.flow_waiters (downstream, key, cause, run_id, since) VALUES ($1, '', 'concurrency', $2, now())`,
		workload.DownstreamName, ids[1])
	e.wantViolation(opts, invariant.NoCapacityLeaked, "a waiter left for a run that does not wait")
}

// checkFlow runs the flow rules on the scenario's schema.
func (e *env) checkFlow(opts invariant.FlowOptions) *invariant.FlowReport {
	e.t.Helper()
	rep, err := invariant.CheckFlow(e.ctx, e.pool, e.schema, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return rep
}

// wantViolation fails the test unless the flow rules find a violation of
// rule whose detail contains detail.
func (e *env) wantViolation(opts invariant.FlowOptions, rule invariant.Rule, detail string) {
	e.t.Helper()
	rep := e.checkFlow(opts)
	for _, v := range rep.Violations {
		if v.Rule == rule && strings.Contains(v.Detail, detail) {
			return
		}
	}
	e.t.Errorf("no %s violation with %q: %v", rule, detail, rep.Violations)
}

// exec runs a statement on the scenario's schema or fails the test.
func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	if _, err := e.pool.Exec(ctx, strings.ReplaceAll(sql, "{schema}", pgx.Identifier{e.schema}.Sanitize()), args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// TestPostgresRestart_LimitsHoldAndLeakNothing: runs whose steps call the
// downstream (a concurrency limit of 2 and a rate of 8 a second, on one
// key) through two workers while PostgreSQL restarts, fast twice and then
// immediately (a crash, with synchronous commits). The limits hold (from
// the attempts' and the calls' own times), no slot, wait or waiter is left
// behind, every run completes, and the restarts charge nothing: no attempt
// failed, none was rescued.
func TestPostgresRestart_LimitsHoldAndLeakNothing(t *testing.T) {
	t.Parallel()
	cluster := crashableCluster(t)
	e := newEnvOn(t, cluster.URL(), "public")
	w1 := e.worker("w1", leaseOutlastsRestarts)
	w2 := e.worker("w2", leaseOutlastsRestarts)
	var ids []uuid.UUID
	for range 24 {
		ids = append(ids, e.start(
			workload.Step{Kind: workload.Limited, SleepMS: 100},
			workload.Step{Kind: workload.AtLeastOnce, SleepMS: 20},
			workload.Step{Kind: workload.Limited, SleepMS: 100}))
	}
	restartThrice(t, e, cluster, 4)
	for _, id := range ids {
		e.completed(id)
	}
	for _, w := range []*fleet.Worker{w1, w2} {
		stopGracefully(t, w)
	}
	rep := e.checkFlow(invariant.FlowOptions{Calls: workload.Calls(), Invocations: workload.LedgerTable})
	if !rep.OK() || len(rep.Downstreams) != 1 {
		t.Fatalf("flow rules after restarts: %v", rep.Violations)
	}
	d := rep.Downstreams[0]
	t.Logf("downstream %s: %d attempts, peak %d at once, at most %d in a rate interval, throttles %v",
		d.Name, d.Attempts, d.Peak, d.MaxWindow, d.Throttles)
	if d.Throttles["concurrency"]+d.Throttles["rate"] == 0 {
		t.Errorf("no step was throttled: the limits were never tested")
	}
	gen := e.check()
	if gen.Attempts["failed"] != 0 || gen.Attempts["lost"] != 0 {
		t.Errorf("attempts %v after restarts shorter than the lease, want none failed or lost", gen.Attempts)
	}
	if n := mustQuery[int](e, `SELECT count(*) FROM {schema}.attempts WHERE is_rescue`); n != 0 {
		t.Errorf("%d rescue attempts", n)
	}
}
