package store

import (
	"testing"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/pgtest"
)

// InsertRuns relies on pgx sending a batch outside a transaction as one
// implicit transaction: when its last statement fails, no run of the batch
// is left behind.
func TestInsertBatchIsOneTransaction(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := t.Context()
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	runs := []NewRun{
		{ID: uuid.Must(uuid.NewV7()), Workflow: "wf", Queue: "default", Key: "k", Input: []byte(`1`)},
		{ID: uuid.Must(uuid.NewV7()), Workflow: "wf", Queue: "default", Input: []byte(`2`)},
	}
	b := s.newInsert(runs).batch()
	if len(b.QueuedQueries) != 2 {
		t.Fatalf("%d statements, want insert and lookup", len(b.QueuedQueries))
	}
	b.Queue("SELECT 1/0")
	if err := pool.SendBatch(ctx, b).Close(); err == nil {
		t.Fatal("batch with a failing last statement succeeded")
	}
	var n int
	if err := pool.QueryRow(ctx, s.sql(`SELECT count(*) FROM {schema}.runs`)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d runs left after the failed batch (%v), want 0", n, err)
	}
	if _, err := s.InsertRuns(ctx, pool, runs); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, s.sql(`SELECT count(*) FROM {schema}.runs`)).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d runs after the real batch (%v), want 2", n, err)
	}
}
