package sdk_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// In session mode each client connection holds a server connection for as
// long as it is open, so the pooler's pool must hold every connection
// Tenure opens through it, as the "Connection poolers" section of
// docs/operations.md counts them: per worker, its pool_max_conns and 3
// connections of its own (LISTEN, heartbeat, committer); per client, its
// pool_max_conns and 1 LISTEN connection. Sized so, a worker and a client
// work through it, and Tenure then holds every server connection of the
// pool: one connection more waits, as one of Tenure's would in a pool one
// smaller (run so, this test saw the fourth transactional activity's BEGIN
// wait, and no run end).
func TestPooler_SessionModePoolSizedByTheFormulaServesAWorkerAndAClient(t *testing.T) {
	t.Parallel()
	const (
		workerPool, workerOwn = 4, 3 // pool_max_conns; LISTEN, heartbeat, committer
		clientPool, clientOwn = 1, 1 // pool_max_conns; LISTEN
		need                  = workerPool + workerOwn + clientPool + clientOwn
	)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	schema := pgtest.Schema(t)
	if err := store.Migrate(ctx, pgtest.Pool(t), store.WithSchema(schema)); err != nil { // directly: Migrate's connections are not counted
		t.Fatal(err)
	}
	url := pgtest.Pgbouncer(t, pgtest.URL(t), "session", pgtest.WithPoolSize(need)) // pgx's default exec mode: session mode needs no setting
	pool := func(maxConns int32) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = maxConns
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}

	// Runs whose transactional activities all wait for each other: the
	// worker's pool reaches pool_max_conns, as under load, and keeps them.
	var (
		in   atomic.Int32
		once sync.Once
		all  = make(chan struct{})
	)
	hold := activities.NewTx("hold", func(ctx context.Context, tx pgx.Tx, n int) (int, error) {
		if in.Add(1) >= workerPool {
			once.Do(func() { close(all) })
		}
		select {
		case <-all:
			return n, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	holdAll := sdk.NewWorkflow("hold-all", func(ctx context.Context, n int) (int, error) {
		return sdk.Execute(ctx, hold, n)
	})
	cfg := testWorker(schema)
	cfg.Concurrency = workerPool
	w := startWorker(t, pool(workerPool), cfg, holdAll)

	c, err := sdk.NewClient(pool(clientPool), sdk.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sdk.SetListenIdle(c, time.Hour) // its LISTEN connection stays open until Close
	params := make([]sdk.StartParams[int], workerPool)
	for i := range params {
		params[i].Input = i
	}
	runs, err := sdk.StartMany(ctx, c, holdAll, params)
	if err != nil {
		t.Fatal(err)
	}
	for i, run := range runs {
		if out, err := run.Result(ctx); err != nil || out != i {
			t.Fatalf("run %d: Result = %d, %v", i, out, err)
		}
	}

	// Every server connection is held by one of Tenure's, and none waited.
	for {
		p, err := pgtest.ShowPgbouncerPool(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if p.ClientsWaiting != 0 {
			t.Fatalf("a connection waited for a server connection (%+v): the formula counts fewer than Tenure opens", p)
		}
		if p.ServersActive == need {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Tenure holds %d server connections (%+v), the formula counts %d", p.ServersActive, p, need)
		case <-time.After(10 * time.Millisecond):
		}
	}

	// So one connection more waits, until the client closes and its
	// connections give theirs back.
	extra, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close(context.WithoutCancel(ctx))
	ran := make(chan error, 1)
	go func() {
		_, err := extra.Exec(ctx, "SELECT 1")
		ran <- err
	}()
	for waiting := false; !waiting; {
		select {
		case err := <-ran:
			t.Fatalf("a connection beyond the formula's ran its statement (%v): the pool holds more than Tenure needs", err)
		case <-ctx.Done():
			t.Fatal("a connection beyond the formula's never waited")
		case <-time.After(10 * time.Millisecond):
		}
		p, err := pgtest.ShowPgbouncerPool(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		waiting = p.ClientsWaiting == 1
	}
	c.Close() // its LISTEN connection
	if err := <-ran; err != nil {
		t.Fatalf("the waiting connection, once the client closed: %v", err)
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// startWorker starts a worker of defs on pool; it is shut down when the test
// ends.
func startWorker(t *testing.T, pool *pgxpool.Pool, cfg runtime.Config, defs ...sdk.Definition) *runtime.Worker {
	t.Helper()
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(defs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	return w
}
