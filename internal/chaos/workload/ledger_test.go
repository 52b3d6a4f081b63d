package workload

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/pgtest"
)

// A call's ledger row says when the activity was called, not when the row
// reached the database: a worker held up on its way there (here, waiting
// for the pool's only connection; in the chaos runs, frozen by SIGSTOP) is
// not taken to have called when it got through.
func TestLedger_RecordStampsTheCallNotTheRowsArrival(t *testing.T) {
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := pgtest.Schema(t)
	if err := Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	busy, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const held = 500 * time.Millisecond
	time.AfterFunc(held, busy.Release)
	called := time.Now()
	id, err := NewLedger(pool, schema).Record(ctx, activities.Info{RunID: uuid.New(), Step: 1, Attempt: 1, Activity: "a", Epoch: 1, Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	var at time.Time
	if err := pool.QueryRow(ctx, `SELECT at FROM `+pgx.Identifier{schema}.Sanitize()+`.ledger WHERE id = $1`, id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	// The same machine's clock on both sides; a generous bound either way.
	if d := at.Sub(called); d < -100*time.Millisecond || d > held/2 {
		t.Fatalf("the ledger's at is %s after the call, want about 0 (the row waited %s for a connection)", d, held)
	}
}
