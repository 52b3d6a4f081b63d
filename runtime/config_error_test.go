package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// A worker made with a bad configuration returns the configuration error from
// Register, Run and Start, reports it in Health, panics in no method, and
// sends nothing to the database.
func TestWorker_ConfigurationErrorIsReturnedAndNothingPanics(t *testing.T) {
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	wf := sdk.NewWorkflow("w", func(ctx context.Context, x in) (int, error) { return x.N, nil })
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
			w := runtime.NewWorker(tc.pool, tc.cfg)
			calls := []struct {
				name  string
				call  func() error
				isErr bool // the call returns the configuration error
			}{
				{"Register", func() error { return w.Register(wf) }, true},
				{"Run", func() error { return w.Run(ctx) }, true},
				{"Start", func() error { return w.Start(ctx) }, true},
				{"Health", w.Health, true},
				{"Stats", func() error { _ = w.Stats(); return nil }, false},
				{"Label", func() error { _ = w.Label(); return nil }, false},
				{"Shutdown", func() error {
					sctx, cancel := context.WithTimeout(ctx, time.Second)
					defer cancel()
					return w.Shutdown(sctx)
				}, false},
			}
			for _, c := range calls {
				var err error
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("%s panicked: %v", c.name, p)
						}
					}()
					err = c.call()
				}()
				switch {
				case c.isErr && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("%s: %v, want the configuration error (%q)", c.name, err, tc.want)
				case !c.isErr && err != nil:
					t.Errorf("%s: %v, want nil", c.name, err)
				}
			}
			if err := w.Health(); !errors.Is(err, runtime.ErrNotRunning) {
				t.Errorf("Health: %v, want ErrNotRunning", err)
			}
		})
	}
	if n := pool.Stat().AcquireCount() - before; n != 0 {
		t.Fatalf("misconfigured workers acquired %d connections, want none", n)
	}
}
