package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/riveradapter"
	"github.com/tenurehq/tenure/store"
)

// noopArgs is River's benchmark job; its worker does nothing.
type noopArgs struct {
	N int `json:"n"`
}

// Kind names the job kind for River.
func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverEnv is a fresh schema with River's tables (and the history, if any),
// a pool and a client whose completions are reported on done.
type riverEnv struct {
	schema string
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	done   <-chan *river.Event
	unsub  func()
	since  time.Time // the workload's jobs were created after it (fillHistory)
}

// newRiverEnvWith uses the settings of River's own benchmark (riverbench):
// FetchCooldown 2ms and FetchPollInterval 20ms, "much better than the
// client's default values" for throughput, and MaxWorkers 2,000; with, if
// adapter, Tenure's schema migrated beside River's tables and the River
// adapter installed with Record (workload R).
func newRiverEnvWith(ctx context.Context, c config, expect int, adapter bool) (*riverEnv, error) {
	schema := c.prefix + "_river"
	pool, err := newPool(ctx, c.url, c.poolSize)
	if err != nil {
		return nil, err
	}
	e := &riverEnv{schema: schema, pool: pool}
	if err := e.setup(ctx, c, expect, adapter); err != nil {
		pool.Close()
		return nil, err
	}
	return e, nil
}

func (e *riverEnv) setup(ctx context.Context, c config, expect int, adapter bool) error {
	if err := dropSchema(ctx, e.pool, e.schema); err != nil {
		return err
	}
	if _, err := e.pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{e.schema}.Sanitize()); err != nil {
		return err
	}
	driver := riverpgxv5.New(e.pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: e.schema, Logger: quiet})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	if e.since, err = fillHistory(ctx, c, e.pool, e.schema, riverHistory(), riverHistoryTables); err != nil {
		return err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	cfg := &river.Config{
		Schema:            e.schema,
		FetchCooldown:     c.riverCooldown,
		FetchPollInterval: c.riverPoll,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.riverWorkers}},
		Workers:           workers,
		Logger:            quiet,
	}
	if adapter {
		if err := store.Migrate(ctx, e.pool, store.WithSchema(e.schema)); err != nil {
			return err
		}
		r, err := riveradapter.NewRetry(riveradapter.Kind(noopArgs{}.Kind(), policy.Default()), riveradapter.Record(e.pool, e.schema))
		if err != nil {
			return err
		}
		if err := r.Configure(cfg); err != nil {
			return err
		}
	}
	e.client, err = river.NewClient(driver, cfg)
	if err != nil {
		return err
	}
	// Completions are counted from River's subscription, which reports a job
	// once the completer has committed it; the channel holds every event.
	e.done, e.unsub = e.client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: expect + 10,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	return nil
}

func (e *riverEnv) close() {
	e.unsub()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = e.client.Stop(ctx)
	e.pool.Close()
}

// wait takes one event off the subscription; anything but a completion is an
// error.
func (e *riverEnv) wait(ctx context.Context) (*river.Event, error) {
	select {
	case ev := <-e.done:
		if ev.Kind != river.EventKindJobCompleted {
			return nil, fmt.Errorf("job %d: %s", ev.Job.ID, ev.Kind)
		}
		return ev, nil
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("no job completed in a minute")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// completed counts the workload's jobs that completed, not the history's.
func (e *riverEnv) completed(ctx context.Context) (int, error) {
	var n int
	err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{e.schema, "river_job"}.Sanitize()+`
		WHERE state = 'completed' AND created_at >= $1`, e.since).Scan(&n)
	return n, err
}

// riverDrain is A': InsertMany, then the client is started and timed until
// every job completed.
func riverDrain(ctx context.Context, c config, m *meter) (res result, err error) {
	return riverDrainOf(ctx, c, m, result{Workload: "A'", System: "river", Runs: c.runsA, Steps: 1}, false)
}

// riverDrainOf is riverDrain of res's workload, with the adapter if adapter.
func riverDrainOf(ctx context.Context, c config, m *meter, res result, adapter bool) (_ result, err error) {
	n := res.Runs
	e, err := newRiverEnvWith(ctx, c, n, adapter)
	if err != nil {
		return res, err
	}
	defer e.close()
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i].Args = noopArgs{N: i}
	}
	if _, err := e.client.InsertMany(ctx, params); err != nil {
		return res, err
	}
	if err := m.measure(ctx, &res, func() ([]time.Duration, error) {
		if err := e.client.Start(ctx); err != nil {
			return nil, err
		}
		for range n {
			if _, err := e.wait(ctx); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}); err != nil {
		return res, err
	}
	res.Completed, err = e.completed(ctx)
	return res, err
}

// riverLatency is C: one job at a time, Insert then wait for its
// completion, with the client started and idle between jobs.
func riverLatency(ctx context.Context, c config, m *meter) (res result, err error) {
	return riverLatencyOf(ctx, c, m, result{Workload: "C", System: "river", Runs: c.runsC, Steps: 1}, false)
}

// riverLatencyOf is riverLatency of res's workload, with the adapter if
// adapter.
func riverLatencyOf(ctx context.Context, c config, m *meter, res result, adapter bool) (_ result, err error) {
	n := res.Runs
	e, err := newRiverEnvWith(ctx, c, n, adapter)
	if err != nil {
		return res, err
	}
	defer e.close()
	if err := e.client.Start(ctx); err != nil {
		return res, err
	}
	if err := m.measure(ctx, &res, func() ([]time.Duration, error) {
		return callers(ctx, n, 1, func(ctx context.Context, i int) error {
			ins, err := e.client.Insert(ctx, noopArgs{N: i}, nil)
			if err != nil {
				return err
			}
			ev, err := e.wait(ctx)
			if err == nil && ev.Job.ID != ins.Job.ID {
				err = fmt.Errorf("job %d completed while waiting for job %d", ev.Job.ID, ins.Job.ID)
			}
			return err
		})
	}); err != nil {
		return res, err
	}
	res.Completed, err = e.completed(ctx)
	return res, err
}
