package runtime_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// Behind a connection pooler in transaction mode (here a real pgbouncer with
// pool_mode=transaction), the pool's URL picks an exec mode that keeps no
// prepared statement across transactions, and the worker and the client
// LISTEN on a direct connection to PostgreSQL, which is used for nothing
// else. Without a direct connection, set PollOnly (and sdk.WithPollOnly).
func ExampleConfig_transactionPooler() {
	pooledURL, directURL, schema, closeDB := exampledb.Pooler()
	defer closeDB()
	ctx := context.Background()

	pool, err := pgxpool.New(ctx, pooledURL+"&default_query_exec_mode=cache_describe")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		panic(err)
	}
	direct, err := pgx.ParseConfig(directURL) // for LISTEN only
	if err != nil {
		panic(err)
	}

	w, err := runtime.NewWorker(pool, runtime.Config{Schema: schema, ListenConfig: direct})
	if err != nil {
		panic(err)
	}
	if err := w.Register(Welcome); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithListenConfig(direct))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	run, err := sdk.Start(ctx, client, Welcome, Greeting{Name: "Ada"})
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Result(ctx))
	// Output:
	// hello, Ada <nil>
}
