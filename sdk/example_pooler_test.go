package sdk_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// When the pool goes through a connection pooler in transaction mode (here a
// real pgbouncer with pool_mode=transaction), Result waits on a direct
// connection to PostgreSQL, used for LISTEN only.
func ExampleWithListenConfig() {
	pooledURL, directURL, schema, closeDB := exampledb.Pooler()
	defer closeDB()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pooledURL+"&default_query_exec_mode=exec")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		panic(err)
	}
	direct, err := pgx.ParseConfig(directURL)
	if err != nil {
		panic(err)
	}
	cfg := testWorker(schema)
	cfg.ListenConfig = direct
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		panic(err)
	}
	_ = w.Register(Ship)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithListenConfig(direct))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	run, err := sdk.Start(ctx, client, Ship, OrderIn{ID: "P-1"})
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Result(ctx))
	// Output:
	// shipped P-1 <nil>
}

// Where no direct connection can be had, the client polls instead of
// listening: Result returns within a poll interval of the run's end.
func ExampleWithPollOnly() {
	pooledURL, _, schema, closeDB := exampledb.Pooler()
	defer closeDB()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pooledURL+"&default_query_exec_mode=simple_protocol")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		panic(err)
	}
	cfg := testWorker(schema)
	cfg.PollOnly = true // the worker finds new runs every PollInterval
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		panic(err)
	}
	_ = w.Register(Ship)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	client, err := sdk.NewClient(pool, sdk.WithSchema(schema),
		sdk.WithPollOnly(), sdk.WithPollInterval(100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	run, err := sdk.Start(ctx, client, Ship, OrderIn{ID: "P-2"})
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Result(ctx))
	// Output:
	// shipped P-2 <nil>
}
