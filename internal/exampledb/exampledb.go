// Package exampledb gives runnable Examples a migrated Tenure schema of their
// own on the test database (see internal/pgtest), so that the code a user
// copies from an Example has run against real PostgreSQL; and the tests of
// the example programs (examples/) a run of the program as go run runs it
// (RunProgram).
package exampledb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
)

// Open returns a pool and a freshly migrated schema, and a function that drops
// the schema and closes the pool. It panics when no database can be had: an
// Example then fails loudly instead of passing without having run.
func Open() (pool *pgxpool.Pool, schema string, closeFn func()) {
	url, err := pgtest.SharedURL()
	if err != nil {
		panic(fmt.Sprintf("exampledb: no test database: %v", err))
	}
	ctx := context.Background()
	pool, err = pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = "ex_" + hex.EncodeToString(b[:])
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		panic(err)
	}
	return pool, schema, func() {
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	}
}

// Pooler starts a pgbouncer in transaction mode in front of the test
// database (see pgtest.StartPgbouncer) for Examples of running behind a
// connection pooler. It returns the URL through the pgbouncer (ending in
// ?sslmode=disable, so that settings are appended with &), the direct URL
// of the database, a schema name of the Example's own (not yet created: the
// Example migrates it through the pooler), and a function that drops the
// schema and stops the pgbouncer. It panics when either cannot be had.
func Pooler() (pooledURL, directURL, schema string, closeFn func()) {
	directURL, err := pgtest.SharedURL()
	if err != nil {
		panic(fmt.Sprintf("exampledb: no test database: %v", err))
	}
	pooledURL, stop, err := pgtest.StartPgbouncer(directURL, "transaction")
	if err != nil {
		panic(fmt.Sprintf("exampledb: %v", err))
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = "ex_" + hex.EncodeToString(b[:])
	return pooledURL, directURL, schema, func() {
		defer stop()
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, directURL)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}
}
