package operator_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// fabricate writes runs the way workers leave them (see storetest), so that
// Examples and tests have failures to look at without running a worker.
func fabricate(pool *pgxpool.Pool, schema string, outcomes ...storetest.Outcome) []uuid.UUID {
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	ids := make([]uuid.UUID, len(outcomes))
	for i, o := range outcomes {
		if ids[i], err = storetest.Run(context.Background(), st, o); err != nil {
			panic(fmt.Sprintf("fabricate %+v: %v", o, err))
		}
	}
	return ids
}

// queue records a run that no worker claims, as sdk.Start would.
func queue(t *testing.T, pool *pgxpool.Pool, schema, workflow string) uuid.UUID {
	t.Helper()
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	if _, _, _, err := st.InsertRun(t.Context(), pool, store.NewRun{ID: id, Workflow: workflow, Queue: "default", Input: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	return id
}
