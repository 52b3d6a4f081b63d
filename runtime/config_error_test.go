package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
)

// NewWorker returns the configuration error itself, and no worker, without
// sending anything to the database.
func TestNewWorker_ReturnsTheConfigurationError(t *testing.T) {
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	configs := []struct {
		name string
		pool *pgxpool.Pool
		cfg  runtime.Config
		want string
	}{
		{"invalid schema", pool, runtime.Config{Schema: "Bad-Name"}, `invalid schema name "Bad-Name"`},
		{"nil pool", nil, runtime.Config{}, "nil pool"},
		{"short lease", pool, runtime.Config{LeaseTTL: time.Millisecond}, "LeaseTTL"},
		{"heartbeat past lease", pool, runtime.Config{LeaseTTL: time.Second, HeartbeatInterval: time.Second}, "HeartbeatInterval"},
		{"negative concurrency", pool, runtime.Config{Concurrency: -1}, "Concurrency"},
		{"empty queue", pool, runtime.Config{Queues: []string{""}}, "empty queue"},
		{"bad default policy", pool, runtime.Config{Defaults: []policy.Option{policy.MaxAttempts(0)}}, "max_attempts"},
	}
	before := pool.Stat().AcquireCount()
	for _, tc := range configs {
		t.Run(tc.name, func(t *testing.T) {
			w, err := runtime.NewWorker(tc.pool, tc.cfg)
			if w != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewWorker: %v, %v; want no worker and the configuration error (%q)", w, err, tc.want)
			}
		})
	}
	if n := pool.Stat().AcquireCount() - before; n != 0 {
		t.Fatalf("misconfigured workers acquired %d connections, want none", n)
	}
}
