package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/store"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// Migrate is idempotent and safe to run from every process at start-up.
func ExampleMigrate() {
	pool, schema, closeDB := exampledb.Open() // a pool and a schema already migrated once
	defer closeDB()
	ctx := context.Background()

	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		panic(err)
	}
	status, _ := store.Status(ctx, pool, store.WithSchema(schema))
	for _, m := range status {
		fmt.Println(m.Version, m.Name, m.Applied)
	}
	// Output:
	// 1 init true
	// 2 operator true
	// 3 claim_by_workflow true
	// 4 step_error_value true
	// 5 primitives true
	// 6 workers true
	// 7 ui true
	// 8 lean_writes true
	// 9 planner true
	// 10 fencing true
	// 11 wakes true
	// 12 checks true
	// 13 ui_polish true
	// 14 cli true
	// 15 purge_children true
	// 16 flow true
	// 17 fairness true
	// 18 deploys true
	// 19 pinning true
	// 20 schedules true
	// 21 schedule_sql true
	// 22 history_partitions true
	// 23 history_retention true
	// 24 history_stats true
	// 25 history_merge true
	// 26 river true
	// 27 history_layout true
	// 28 flow_counts true
	// 29 flow_fast true
}

// The SQL that Migrate would run, for a DBA to review or to apply with psql
// (tenure migrate up --print-sql): nothing for a schema already migrated,
// every migration for one that does not exist yet.
func ExampleMigrationScript() {
	pool, schema, closeDB := exampledb.Open() // a pool and a schema already migrated once
	defer closeDB()
	ctx := context.Background()

	sc, err := store.MigrationScript(ctx, pool, store.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	fmt.Println(sc.From == store.LatestVersion(), len(sc.Migrations))

	sc, err = store.MigrationScript(ctx, pool, store.WithSchema("billing_not_yet"))
	if err != nil {
		panic(err)
	}
	fmt.Println(sc.From, sc.To == store.LatestVersion(), len(sc.Migrations) == sc.To)
	sql := sc.SQL()
	fmt.Print(sql[:strings.Index(sql, "CREATE TABLE")])
	fmt.Print(sql[strings.LastIndex(sql, "\nINSERT"):])
	// Output:
	// true 0
	// 0 true true
	// BEGIN;
	// SELECT pg_advisory_xact_lock(hashtext('tenure.migrate.billing_not_yet'));
	// CREATE SCHEMA IF NOT EXISTS "billing_not_yet";
	//
	// INSERT INTO "billing_not_yet".schema_version (version, name) VALUES (29, 'flow_fast');
	//
	// COMMIT;
}

// The script from a version, without a database: here the migrations a
// schema at version 12 lacks.
func ExampleScriptFrom() {
	sc, err := store.ScriptFrom(12, store.WithSchema("billing"))
	if err != nil {
		panic(err)
	}
	for _, m := range sc.Migrations {
		fmt.Println(m.Version, m.Name, strings.Contains(m.SQL, `"billing".`))
	}
	_, err = store.ScriptFrom(store.LatestVersion() + 1)
	fmt.Println(errors.Is(err, store.ErrSchemaTooNew))
	// Output:
	// 13 ui_polish true
	// 14 cli true
	// 15 purge_children true
	// 16 flow true
	// 17 fairness true
	// 18 deploys true
	// 19 pinning true
	// 20 schedules true
	// 21 schedule_sql true
	// 22 history_partitions true
	// 23 history_retention true
	// 24 history_stats true
	// 25 history_merge true
	// 26 river true
	// 27 history_layout true
	// 28 flow_counts true
	// 29 flow_fast true
	// true
}
