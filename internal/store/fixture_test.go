package store_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/policy"
)

// newStore returns a store on a freshly migrated schema of its own.
func newStore(t testing.TB) *store.Store {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// history writes runs the way a worker does, through the store's own
// statements, so that tests of the operator surface need no worker.
type history struct {
	fatalf func(format string, args ...any) // t.Fatalf
	st     *store.Store
}

func newHistory(t testing.TB, st *store.Store) history { return history{t.Fatalf, st} }

// outcome of a fabricated run (see storetest.Outcome).
type outcome struct {
	workflow, activity string
	errors             int           // failed attempts before the end
	reason             policy.Reason // "" completes the run; else fails it with this reason
}

// run fabricates one run of o.workflow with one step of o.activity and
// returns its ID.
func (h history) run(o outcome) uuid.UUID {
	id, err := storetest.Run(context.Background(), h.st, storetest.Outcome{
		Workflow: o.workflow, Activity: o.activity, Errors: o.errors, Reason: o.reason})
	if err != nil {
		h.fatalf("%v", err)
	}
	return id
}

// scalar runs a query returning one value; {schema} is the store's schema.
func scalar[T any](t testing.TB, st *store.Store, query string, args ...any) T {
	t.Helper()
	var v T
	q := replaceSchema(query, st.Schema())
	if err := st.Pool().QueryRow(context.Background(), q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}
