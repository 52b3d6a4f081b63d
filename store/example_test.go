package store_test

import (
	"context"
	"fmt"
	"os"
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
}
