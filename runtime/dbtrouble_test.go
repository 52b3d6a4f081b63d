package runtime_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// records keeps what a worker logs.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	r.mu.Unlock()
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// count is how many records contain s.
func (r *records) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// roleFor creates a login role with only the DML a worker needs on the env's
// schema (docs/operations.md), and a pool that connects as it.
func roleFor(e *env) (role string, pool *pgxpool.Pool) {
	e.t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	role = "tenure_worker_" + hex.EncodeToString(b[:])
	schema := pgx.Identifier{e.schema}.Sanitize()
	for _, stmt := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + role,
		`GRANT USAGE ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + role,
	} {
		if _, err := e.pool.Exec(e.ctx, stmt); err != nil {
			e.t.Fatalf("%s: %v", stmt, err)
		}
	}
	cfg, err := pgxpool.ParseConfig(pgtest.URL(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	pool, err = pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		pool.Close()
		ctx := context.Background()
		_, _ = e.pool.Exec(ctx, `DROP OWNED BY `+role)
		_, _ = e.pool.Exec(ctx, `DROP ROLE `+role)
	})
	return role, pool
}

// A worker that cannot write (its role lost INSERT on attempts mid-run)
// quarantines nothing: no run fails, no lease is lost, nothing is charged to
// any budget. It keeps its runs, retries with backoff, logs the error once,
// and reports itself unhealthy with the real error; once the grant is back
// every run completes, with one attempt per step.
func TestDatabaseError_PermissionDeniedQuarantinesNothingAndReportsUnhealthy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	role, pool := roleFor(e)
	g := newGate(e)
	first := activities.New("first", func(_ context.Context, n int) (int, error) { g.wait(); return n, nil })
	second := activities.New("second", func(_ context.Context, n int) (int, error) { return n + 1, nil })
	wf := sdk.NewWorkflow("revoked", func(ctx context.Context, n int) (int, error) {
		n, err := sdk.Execute(ctx, first, n)
		if err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, second, n)
	})
	logs := &records{}
	cfg := e.config()
	cfg.LeaseTTL, cfg.HeartbeatInterval = 2*time.Second, 300*time.Millisecond
	cfg.Logger = slog.New(logs)
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(wf); err != nil {
		t.Fatal(err)
	}
	if err := w.Health(); err != runtime.ErrNotRunning {
		t.Fatalf("Health before Start: %v, want ErrNotRunning", err)
	}
	if err := w.Start(context.WithoutCancel(e.ctx)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	const n = 5
	var runs []*sdk.Run[int]
	for i := range n {
		r, err := sdk.Start(e.ctx, e.client, wf, i)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	eventually(t, "every first step running", func() bool { return g.waiting.Load() == n })
	if err := w.Health(); err != nil {
		t.Fatalf("Health while fine: %v", err)
	}
	epochs := map[string]int64{}
	for _, r := range runs {
		epochs[r.ID.String()] = e.epoch(r.ID)
	}

	revoke := fmt.Sprintf(`REVOKE INSERT ON %s.attempts FROM %s`, pgx.Identifier{e.schema}.Sanitize(), role)
	if _, err := e.pool.Exec(e.ctx, revoke); err != nil {
		t.Fatal(err)
	}
	g.release() // every run now checkpoints step 1 and tries to start step 2
	eventually(t, "Health to report the permission error", func() bool {
		err := w.Health()
		return err != nil && strings.Contains(err.Error(), "permission denied") && strings.Contains(err.Error(), "write runs")
	})
	// Longer than a lease: the heartbeat keeps every run.
	time.Sleep(cfg.LeaseTTL + time.Second)
	for _, r := range runs {
		if s := e.runStatus(r.ID); s != "running" {
			t.Errorf("run %s is %s while the worker cannot write, want running", r.ID, s)
		}
		if ep := e.epoch(r.ID); ep != epochs[r.ID.String()] {
			t.Errorf("run %s was reclaimed (epoch %d, was %d)", r.ID, ep, epochs[r.ID.String()])
		}
	}
	if f := scalar[int](e, fmt.Sprintf(`SELECT count(*) FROM %s.failures`, e.schema)); f != 0 {
		t.Fatalf("%d failure rows while the worker could not write", f)
	}
	if err := w.Health(); err == nil {
		t.Fatal("Health is nil while every write is refused")
	} else {
		t.Logf("Health: %v", err)
	}

	grant := fmt.Sprintf(`GRANT INSERT ON %s.attempts TO %s`, pgx.Identifier{e.schema}.Sanitize(), role)
	if _, err := e.pool.Exec(e.ctx, grant); err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		if out, err := result(t, r); err != nil || out != i+1 {
			t.Fatalf("run %d: %d, %v", i, out, err)
		}
		if got := strings.Join(e.statuses(r.ID), " "); got != "1.1:succeeded 2.1:succeeded" {
			t.Errorf("run %d attempts: %s, want one per step", i, got)
		}
	}
	eventually(t, "Health to be nil again", func() bool { return w.Health() == nil })
	st := w.Stats()
	if st.LeasesLost != 0 || st.Failed != 0 || st.DatabaseErrors == 0 {
		t.Fatalf("stats %+v: want no lease lost, no failure, some database errors", st)
	}
	// Logged once (the same error, within troubleLogEvery), and its end once.
	if f, ok := logs.count("write runs failed"), logs.count("write runs works again"); f != 1 || ok != 1 {
		t.Fatalf("logged the failure %d times and the recovery %d times (of %d errors), want once each", f, ok, st.DatabaseErrors)
	}
}
