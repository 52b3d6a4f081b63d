package runtime_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/policy"
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

// What PostgreSQL cannot store is the activity's problem, told at once, not
// a database error retried for ever: an output holding a NUL character
// (jsonb refuses \u0000) fails its step as non-retryable, and an error
// message with invalid UTF-8 and a NUL is stored with those replaced.
func TestDatabaseError_UnstorableOutputFailsItsStepAndBadTextIsCleaned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls atomic.Int32
	nul := activities.New("nul-output", func(context.Context, int) (string, error) {
		calls.Add(1)
		return "a\x00b", nil
	}, policy.MaxAttempts(3))
	badText := activities.New("bad-text", func(context.Context, int) (string, error) {
		return "", policy.Permanent(errors.New("bad \xff byte and a \x00 here"))
	})
	escaped := activities.New("escaped", func(context.Context, int) (string, error) {
		return `a literal \u0000 is fine`, nil
	})
	wf := sdk.NewWorkflow("unstorable", func(ctx context.Context, n int) (string, error) {
		switch n {
		case 0:
			return sdk.Execute(ctx, nul, n)
		case 1:
			return sdk.Execute(ctx, badText, n)
		}
		return sdk.Execute(ctx, escaped, n)
	})
	e.worker(e.config(), wf)
	var runs []*sdk.Run[string]
	for i := range 3 {
		r, err := sdk.Start(e.ctx, e.client, wf, i)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	_, err := result(t, runs[0])
	var re *sdk.RunError
	if !errors.As(err, &re) || re.Reason != sdk.ReasonNonRetryable || !strings.Contains(re.Message, "NUL character") {
		t.Fatalf("NUL output: %v, want non_retryable naming the NUL", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("NUL output: invoked %d times, want once", calls.Load())
	}
	_, err = result(t, runs[1])
	if !errors.As(err, &re) || re.Message != "bad \uFFFD byte and a \uFFFD here" {
		t.Fatalf("bad text: %v, want the message stored with U+FFFD", err)
	}
	if out, err := result(t, runs[2]); err != nil || out != `a literal \u0000 is fine` {
		t.Fatalf("escaped backslash: %q, %v", out, err)
	}
}

// A worker whose role cannot apply wakes (a deployment that upgraded its
// schema without the grants on the wakes table) still claims and runs: the
// refused wakes are said in Health and the log, and tried again at each
// poll, never in the way of the claims.
func TestDatabaseError_WakesRefusedHoldUpNoClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	role, pool := roleFor(e)
	if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`REVOKE ALL ON %s.wakes FROM %s`, pgx.Identifier{e.schema}.Sanitize(), role)); err != nil {
		t.Fatal(err)
	}
	logs := &records{}
	cfg := e.config()
	cfg.Logger = slog.New(logs)
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(echoWorkflow); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.WithoutCancel(e.ctx)); err != nil {
		t.Fatal(err)
	}
	defer stop(t, w, 5*time.Second)
	for i := range 5 {
		r, _ := sdk.Start(e.ctx, e.client, echoWorkflow, in{N: i})
		if out, err := result(t, r); err != nil || out != i {
			t.Fatalf("run %d with the wakes refused: %d, %v", i, out, err)
		}
	}
	eventually(t, "the refusal said in Health", func() bool {
		err := w.Health()
		return err != nil && strings.Contains(err.Error(), "apply wakes") && strings.Contains(err.Error(), "permission denied")
	})
	if logs.count("apply wakes") == 0 {
		t.Fatal("the refused wakes were not logged")
	}
}
