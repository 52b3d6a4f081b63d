package main

import (
	"context"
	"fmt"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// dbosNoop is the step every DBOS step calls.
func dbosNoop(context.Context) (int, error) { return 0, nil }

// dbosWF runs steps no-op steps, each checkpointed by RunAsStep.
func dbosWF(ctx dbos.Context, steps int) (int, error) {
	for range steps {
		if _, err := dbos.RunAsStep(ctx, dbosNoop, dbos.WithStepName("noop")); err != nil {
			return 0, err
		}
	}
	return steps, nil
}

// dbosAppName is the benchmark's application name in DBOS.
const dbosAppName = "tenure-bench"

// dbosEnv is a launched DBOS context whose system database is a fresh
// schema (with the history, if any) on its own pool.
type dbosEnv struct {
	schema string
	pool   *pgxpool.Pool
	ctx    dbos.Context
	since  time.Time // the workload's workflows were created after it (fillHistory)
}

// newDBOSEnv launches DBOS with its system tables in their own schema
// (Config.DatabaseSchema) on a pool of c.poolSize (Config.SystemDBPool).
// Workflows run in this process: RunWorkflow executes the workflow at once
// in a goroutine, with no queue in between, DBOS's lowest-latency path.
func newDBOSEnv(ctx context.Context, c config) (*dbosEnv, error) {
	schema := c.prefix + "_dbos"
	pool, err := newPool(ctx, c.url, c.poolSize)
	if err != nil {
		return nil, err
	}
	if err := dropSchema(ctx, pool, schema); err != nil {
		pool.Close()
		return nil, err
	}
	dctx, err := dbos.NewContext(ctx, dbos.Config{
		AppName:        dbosAppName,
		SystemDBPool:   pool,
		DatabaseSchema: schema,
		Logger:         quiet,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	dbos.RegisterWorkflow(dctx, dbosWF)
	// NewContext created the tables; the history is there before Launch, as
	// when a deployment restarts.
	since, err := fillHistory(ctx, c, pool, schema, dbosHistory(dbos.GetApplicationVersion(dctx), dbosAppName), dbosHistoryTables)
	if err == nil {
		err = dbos.Launch(dctx)
	}
	if err != nil {
		_ = dbos.Shutdown(dctx, 10*time.Second)
		pool.Close()
		return nil, err
	}
	return &dbosEnv{schema: schema, pool: pool, ctx: dctx, since: since}, nil
}

func (e *dbosEnv) close() {
	_ = dbos.Shutdown(e.ctx, 30*time.Second)
	e.pool.Close()
}

// completed counts the workload's workflows that succeeded, not the
// history's.
func (e *dbosEnv) completed(ctx context.Context) (int, error) {
	var n int
	err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{e.schema, "workflow_status"}.Sanitize()+`
		WHERE status = 'SUCCESS' AND created_at >= $1`, e.since.UnixMilli()).Scan(&n)
	return n, err
}

func (e *dbosEnv) call(steps int) error {
	h, err := dbos.RunWorkflow(e.ctx, dbosWF, steps)
	if err != nil {
		return err
	}
	out, err := h.GetResult()
	if err == nil && out != steps {
		err = fmt.Errorf("workflow %s returned %d, want %d", h.GetWorkflowID(), out, steps)
	}
	return err
}

// dbosCallers is A and B: callers each run a workflow and wait for its
// result.
func dbosCallers(ctx context.Context, c config, m *meter, load string, n, steps int) (res result, err error) {
	res = result{Workload: load, System: "dbos", Runs: n, Steps: steps}
	return dbosTimed(ctx, c, m, res, c.callers, steps)
}

// dbosLatency is C: one workflow at a time.
func dbosLatency(ctx context.Context, c config, m *meter) (result, error) {
	res := result{Workload: "C", System: "dbos", Runs: c.runsC, Steps: 1}
	return dbosTimed(ctx, c, m, res, 1, 1)
}

func dbosTimed(ctx context.Context, c config, m *meter, res result, k, steps int) (result, error) {
	e, err := newDBOSEnv(ctx, c)
	if err != nil {
		return res, err
	}
	defer e.close()
	if err := m.measure(ctx, &res, func() ([]time.Duration, error) {
		return callers(ctx, res.Runs, k, func(context.Context, int) error { return e.call(steps) })
	}); err != nil {
		return res, err
	}
	res.Completed, err = e.completed(ctx)
	return res, err
}
