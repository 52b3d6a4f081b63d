package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// benchIn is the input of the benchmark workflow: how many steps to run,
// with a durable sleep of SleepMS between them (E), after receiving a
// signal first (S).
type benchIn struct {
	Steps   int  `json:"steps"`
	SleepMS int  `json:"sleep_ms,omitempty"`
	Signal  bool `json:"signal,omitempty"`
}

// noop is the activity every step calls.
var noop = activities.New("noop", func(_ context.Context, n int) (int, error) { return n, nil })

// benchWF runs in.Steps no-op steps, each a durable checkpoint.
var benchWF = sdk.NewWorkflow("bench", func(ctx context.Context, in benchIn) (int, error) {
	if in.Signal {
		if _, err := sdk.Receive[int](ctx, "go", 0); err != nil {
			return 0, err
		}
	}
	for i := range in.Steps {
		if i > 0 && in.SleepMS > 0 {
			if err := sdk.Sleep(ctx, time.Duration(in.SleepMS)*time.Millisecond); err != nil {
				return 0, err
			}
		}
		if _, err := sdk.Execute(ctx, noop, i); err != nil {
			return 0, err
		}
	}
	return in.Steps, nil
})

// tenureEnv is a fresh schema (with the history, if any), a pool and a
// client on it.
type tenureEnv struct {
	schema string
	pool   *pgxpool.Pool
	client *sdk.Client
	since  time.Time // the workload's runs were created after it (fillHistory)
}

func newTenureEnv(ctx context.Context, c config) (*tenureEnv, error) {
	schema := c.prefix + "_tenure"
	pool, err := newPool(ctx, c.url, c.poolSize)
	if err != nil {
		return nil, err
	}
	if err := dropSchema(ctx, pool, schema); err != nil {
		pool.Close()
		return nil, err
	}
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		pool.Close()
		return nil, err
	}
	if err := partition(ctx, pool, schema, c.partitions); err != nil {
		pool.Close()
		return nil, err
	}
	since, err := fillHistory(ctx, c, pool, schema, tenureHistory(), tenureHistoryTables)
	if err != nil {
		pool.Close()
		return nil, err
	}
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &tenureEnv{schema: schema, pool: pool, client: client, since: since}, nil
}

func (e *tenureEnv) close() {
	closeClient(e.client)
	e.pool.Close()
}

// worker is an in-process worker of benchWF and of more workflows.
func (e *tenureEnv) worker(c config, concurrency int, more ...*sdk.Workflow[benchIn, int]) (*runtime.Worker, error) {
	w, err := runtime.NewWorker(e.pool, runtime.Config{Schema: e.schema, Concurrency: concurrency, Logger: quiet})
	if err != nil {
		return nil, err
	}
	wfs := []*sdk.Workflow[benchIn, int]{benchWF}
	for _, wf := range more {
		if !slices.Contains(wfs, wf) {
			wfs = append(wfs, wf)
		}
	}
	for _, wf := range wfs {
		if err := w.Register(wf); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// completed counts the workload's runs that finished as completed, not the
// history's. The time is written into the statement, not passed, so that
// each count is planned for it: through the index of creation times, it reads
// the workload's runs only, not the history's million (D counts every 10 ms
// of its timed part).
func (e *tenureEnv) completed(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{e.schema, "runs"}.Sanitize()+`
		WHERE status = 'completed' AND created_at >= '`+e.since.UTC().Format("2006-01-02 15:04:05.999999Z07:00")+`'`).Scan(&n)
	return n, err
}

// left reports whether a run is still queued or running (a history's runs
// are all finished).
func (e *tenureEnv) left(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (bool, error) {
	runs := pgx.Identifier{e.schema, "runs"}.Sanitize()
	var left bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+runs+` WHERE status = 'queued')
		OR EXISTS (SELECT 1 FROM `+runs+` WHERE status = 'running')`).Scan(&left)
	return left, err
}

func stopWorker(w *runtime.Worker) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return w.Shutdown(ctx)
}

// tenureCallers is A and B: callers each Start a run and wait for its
// Result, against one in-process worker.
func tenureCallers(ctx context.Context, c config, m *meter, load string, n, steps, sleepMS int) (res result, err error) {
	return tenureCallersOf(ctx, c, m, benchWF, result{Workload: load, System: "tenure", Runs: n, Steps: steps}, sleepMS)
}

// tenureCallersOf is tenureCallers for runs of wf, charged to res.
func tenureCallersOf(ctx context.Context, c config, m *meter, wf *sdk.Workflow[benchIn, int], res result, sleepMS int) (_ result, err error) {
	n, steps := res.Runs, res.Steps
	e, err := newTenureEnv(ctx, c)
	if err != nil {
		return res, err
	}
	defer e.close()
	w, err := e.worker(c, c.tenureConcurrency, wf)
	if err != nil {
		return res, err
	}
	if err := w.Start(ctx); err != nil {
		return res, err
	}
	defer func() {
		if serr := stopWorker(w); err == nil {
			err = serr
		}
	}()
	if err := m.measure(ctx, &res, func() ([]time.Duration, error) {
		return callers(ctx, n, c.callers, func(ctx context.Context, _ int) error {
			r, err := sdk.Start(ctx, e.client, wf, benchIn{Steps: steps, SleepMS: sleepMS})
			if err != nil {
				return err
			}
			out, err := r.Result(ctx)
			if err == nil && out != steps {
				err = fmt.Errorf("run %s returned %d, want %d", r.ID, out, steps)
			}
			return err
		})
	}); err != nil {
		return res, err
	}
	res.Completed, err = e.completed(ctx, e.pool)
	return res, err
}

// tenureDrain is A': the runs are started first (one transaction), then one
// in-process worker is started and timed until it completed them all.
func tenureDrain(ctx context.Context, c config, m *meter) (res result, err error) {
	n := c.runsA
	res = result{Workload: "A'", System: "tenure", Runs: n, Steps: 1}
	e, err := newTenureEnv(ctx, c)
	if err != nil {
		return res, err
	}
	defer e.close()
	if _, err := startMany(ctx, e.client, benchWF, inputs(n, 1)); err != nil {
		return res, err
	}
	w, err := e.worker(c, c.tenureDrain)
	if err != nil {
		return res, err
	}
	defer func() { // Shutdown of a worker that never started is a no-op
		if serr := stopWorker(w); err == nil {
			err = serr
		}
	}()
	if err := m.measure(ctx, &res, func() ([]time.Duration, error) {
		if err := w.Start(ctx); err != nil {
			return nil, err
		}
		// The worker counts a completion after its commit; reading the count
		// costs the database nothing.
		if err := waitFor(ctx, time.Millisecond, 10*time.Minute, "drain", func() (bool, error) {
			return w.Stats().Completed >= int64(n), nil
		}); err != nil {
			return nil, err
		}
		return nil, nil
	}); err != nil {
		return res, err
	}
	res.Completed, err = e.completed(ctx, e.pool)
	return res, err
}

// tenureLatency is C: one run at a time, Start then Result, with the worker
// in a process of its own, idle between runs.
func tenureLatency(ctx context.Context, c config, m *meter) (res result, err error) {
	n := c.runsC
	res = result{Workload: "C", System: "tenure", Runs: n, Steps: 1, Workers: 1}
	return withWorkerProcess(ctx, c, m, res, func(e *tenureEnv) ([]time.Duration, error) {
		return callers(ctx, n, 1, func(ctx context.Context, _ int) error {
			r, err := sdk.Start(ctx, e.client, benchWF, benchIn{Steps: 1})
			if err != nil {
				return err
			}
			_, err = r.Result(ctx)
			return err
		})
	})
}

// tenureFleet is D: the runs are started first, then drained by 1, 2 and 4
// worker processes started together.
func tenureFleet(ctx context.Context, c config, m *meter) ([]result, error) {
	var results []result
	for _, k := range c.dWorkers {
		res, err := tenureFleetOf(ctx, c, m, k)
		results = append(results, res)
		if err != nil {
			return results, fmt.Errorf("%d workers: %w", k, err)
		}
	}
	return results, nil
}

func tenureFleetOf(ctx context.Context, c config, m *meter, k int) (res result, err error) {
	n := c.runsD
	res = result{Workload: "D", System: "tenure", Runs: n, Steps: 1, Workers: k}
	e, err := newTenureEnv(ctx, c)
	if err != nil {
		return res, err
	}
	defer e.close()
	if _, err := startMany(ctx, e.client, benchWF, inputs(n, 1)); err != nil {
		return res, err
	}
	fleet, err := spawnWorkers(ctx, c, e.schema, k)
	if err != nil {
		return res, err
	}
	defer fleet.kill()
	if err := m.measure(ctx, &res, func() ([]time.Duration, error) {
		if err := fleet.start(); err != nil {
			return nil, err
		}
		// Read on the meter's connection: no transaction ID, no WAL. Whether
		// a run is left is two probes of the queued and running runs'
		// partial indexes; counting the completed runs every 10 ms (4.5 to
		// 7 ms a count of 30,000) took a sixth of the machine's CPU from
		// the drain it measured. finish counts them once, after.
		if err := waitFor(ctx, 10*time.Millisecond, 10*time.Minute, "drain", func() (bool, error) {
			left, err := e.left(ctx, m.conn)
			return !left, err
		}); err != nil {
			return nil, err
		}
		return nil, nil
	}); err != nil {
		return res, err
	}
	return e.finish(ctx, fleet, res)
}

// finish stops the worker processes of fleet and adds their lost leases and
// the runs completed to res.
func (e *tenureEnv) finish(ctx context.Context, f fleet, res result) (result, error) {
	stats, err := f.stop()
	if err != nil {
		return res, err
	}
	res.LeasesLost = &stats.LeasesLost
	res.Completed, err = e.completed(ctx, e.pool)
	return res, err
}

func inputs(n, steps int) []benchIn {
	ins := make([]benchIn, n)
	for i := range ins {
		ins[i].Steps = steps
	}
	return ins
}

// tenureSignal is S: one run at a time waits for a signal, with the worker
// in a process of its own; the signal is sent once the run is seen waiting
// (it holds no lease then). The latency is the database's: from the
// signal's sent_at to its consumed_at, when the woken run received it.
func tenureSignal(ctx context.Context, c config, m *meter) (res result, err error) {
	n := c.runsC
	res = result{Workload: "S", System: "tenure", Runs: n, Steps: 1, Workers: 1}
	return withWorkerProcess(ctx, c, m, res, func(e *tenureEnv) ([]time.Duration, error) {
		runs := pgx.Identifier{e.schema, "runs"}.Sanitize()
		signals := pgx.Identifier{e.schema, "signals"}.Sanitize()
		for range n {
			r, err := sdk.Start(ctx, e.client, benchWF, benchIn{Steps: 1, Signal: true})
			if err != nil {
				return nil, err
			}
			if err := waitFor(ctx, time.Millisecond, time.Minute, "the run to wait", func() (bool, error) {
				var waiting bool
				err := m.conn.QueryRow(ctx, `SELECT coalesce(waiting_for, '') = 'signal:go' AND status = 'queued' FROM `+runs+` WHERE id = $1`, r.ID).Scan(&waiting)
				return waiting, err
			}); err != nil {
				return nil, err
			}
			if err := e.client.Send(ctx, r.ID, "go", 1); err != nil {
				return nil, err
			}
			if _, err := r.Result(ctx); err != nil {
				return nil, err
			}
		}
		rows, err := m.conn.Query(ctx, `SELECT extract(epoch FROM consumed_at - sent_at)::float8 FROM `+signals)
		if err != nil {
			return nil, err
		}
		secs, err := pgx.CollectRows(rows, pgx.RowTo[float64])
		lat := make([]time.Duration, len(secs))
		for i, s := range secs {
			lat[i] = time.Duration(s * float64(time.Second))
		}
		return lat, err
	})
}

// withWorkerProcess measures body against a fresh schema served by one
// worker in a process of its own, idle until body starts runs, and adds the
// worker's lost leases and the runs completed to res.
func withWorkerProcess(ctx context.Context, c config, m *meter, res result, body func(e *tenureEnv) ([]time.Duration, error)) (_ result, err error) {
	e, err := newTenureEnv(ctx, c)
	if err != nil {
		return res, err
	}
	defer e.close()
	fleet, err := spawnWorkers(ctx, c, e.schema, 1)
	if err != nil {
		return res, err
	}
	defer fleet.kill()
	if err := fleet.start(); err != nil {
		return res, err
	}
	if err := m.measure(ctx, &res, func() ([]time.Duration, error) { return body(e) }); err != nil {
		return res, err
	}
	return e.finish(ctx, fleet, res)
}
