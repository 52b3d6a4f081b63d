package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/faultproxy"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// A worker whose network to PostgreSQL goes silent (a proxy that stops
// forwarding, sockets open: no reset, no timeout from the kernel) stops its
// activities within the lease TTL, before another worker can take their
// runs over; the runs complete on that other worker; and the black-holed
// worker's Shutdown returns on time.
func TestBlackhole_WorkerStopsItsActivitiesWithinTheLeaseAndShutsDownOnTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proxy, cutPool := proxiedPool(e)

	type stopped struct {
		at    time.Time
		cause error
	}
	var mu sync.Mutex
	cancelled := map[uuid.UUID]stopped{}
	rescuedAt := map[uuid.UUID]time.Time{}
	running := make(chan struct{}, 16)
	hold := activities.New("hold", func(ctx context.Context, _ int) (string, error) {
		info, _ := activities.InfoFrom(ctx)
		if info.Attempt == 1 {
			running <- struct{}{}
			<-ctx.Done()
			mu.Lock()
			cancelled[info.RunID] = stopped{at: time.Now(), cause: context.Cause(ctx)}
			mu.Unlock()
			return "", ctx.Err()
		}
		mu.Lock()
		rescuedAt[info.RunID] = time.Now()
		mu.Unlock()
		return info.Worker, nil
	})
	wf := sdk.NewWorkflow("blackholed", func(ctx context.Context, n int) (string, error) {
		return sdk.Execute(ctx, hold, n)
	})

	wcfg := e.config()
	wcfg.LeaseTTL, wcfg.HeartbeatInterval = 3*time.Second, 300*time.Millisecond
	wcfg.Label = "cut-off"
	const n = 3
	cut, runs := startHeld(e, cutPool, wcfg, wf, n, running)
	time.Sleep(wcfg.HeartbeatInterval) // a renewal or two went through
	blackholed := time.Now()
	proxy.Blackhole()

	rcfg := e.config()
	rcfg.Label = "rescuer"
	e.worker(rcfg, wf)
	for i, r := range runs {
		out, err := result(t, r)
		if err != nil || out != "rescuer" {
			t.Fatalf("run %d: %q, %v; want it completed by the rescuer", i, out, err)
		}
	}
	mu.Lock()
	for _, r := range runs {
		s, ok := cancelled[r.ID]
		switch {
		case !ok:
			t.Errorf("run %s: the cut-off worker's activity was never cancelled", r.ID)
		case !errors.Is(s.cause, activities.ErrLeaseLost):
			t.Errorf("run %s: activity cancelled with %v, want ErrLeaseLost", r.ID, s.cause)
		case s.at.Sub(blackholed) > wcfg.LeaseTTL:
			t.Errorf("run %s: activity cancelled %s after the black hole, want within the lease TTL %s", r.ID, s.at.Sub(blackholed), wcfg.LeaseTTL)
		case !s.at.Before(rescuedAt[r.ID]):
			t.Errorf("run %s: the rescuer ran its step before the cut-off worker stopped it", r.ID)
		default:
			t.Logf("run %s: stopped %s after the black hole, rescued %s after it", r.ID,
				s.at.Sub(blackholed).Round(time.Millisecond), rescuedAt[r.ID].Sub(blackholed).Round(time.Millisecond))
		}
	}
	mu.Unlock()

	const drain = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	began := time.Now()
	err := cut.Shutdown(ctx)
	took := time.Since(began)
	t.Logf("Shutdown of the cut-off worker: %s, %v", took.Round(time.Millisecond), err)
	if took > drain+500*time.Millisecond {
		t.Fatalf("Shutdown took %s with a %s context", took, drain)
	}
	if st := cut.Stats(); st.LeasesLost != n {
		t.Fatalf("cut-off worker stats %+v, want %d leases lost", st, n)
	}
}

// Shutdown of a worker whose network went silent while it holds runs returns
// by its context's deadline, saying what it could not hand back; the runs
// are rescued once their leases expire.
func TestBlackhole_ShutdownReturnsByItsDeadlineWhileHoldingRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proxy, cutPool := proxiedPool(e)

	running := make(chan struct{}, 16)
	hold := activities.New("hold", func(ctx context.Context, _ int) (string, error) {
		if info, _ := activities.InfoFrom(ctx); info.Attempt == 1 {
			running <- struct{}{}
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "rescued", nil
	})
	wf := sdk.NewWorkflow("blackholed-shutdown", func(ctx context.Context, n int) (string, error) {
		return sdk.Execute(ctx, hold, n)
	})
	wcfg := e.config()
	wcfg.LeaseTTL, wcfg.HeartbeatInterval = 3*time.Second, 300*time.Millisecond
	const n = 3
	cut, runs := startHeld(e, cutPool, wcfg, wf, n, running)
	proxy.Blackhole()
	const drain = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	began := time.Now()
	err := cut.Shutdown(ctx)
	took := time.Since(began)
	t.Logf("Shutdown: %s, %v", took.Round(time.Millisecond), err)
	if took > drain+200*time.Millisecond {
		t.Fatalf("Shutdown took %s with a %s context", took, drain)
	}
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the deadline and the runs not handed back", err)
	}
	e.worker(e.config(), wf)
	for i, r := range runs {
		if out, err := result(t, r); err != nil || out != "rescued" {
			t.Fatalf("run %d: %q, %v", i, out, err)
		}
	}
}

// proxiedPool is a pool whose connections go through a proxy the test can
// black-hole.
func proxiedPool(e *env) (*faultproxy.Proxy, *pgxpool.Pool) {
	e.t.Helper()
	proxy, url, err := faultproxy.StartFor(pgtest.URL(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		e.t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	// First: closing the proxy ends the cancel requests pgx sent into the
	// black hole, which the pool's Close would otherwise wait for (15s).
	e.t.Cleanup(func() { _ = proxy.Close() })
	return proxy, pool
}

// startHeld starts a worker on pool and n runs of wf, and waits until each
// of their first attempts is running (signalled on running).
func startHeld(e *env, pool *pgxpool.Pool, cfg runtime.Config, wf *sdk.Workflow[int, string], n int, running <-chan struct{}) (*runtime.Worker, []*sdk.Run[string]) {
	e.t.Helper()
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Register(wf); err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(context.WithoutCancel(e.ctx)); err != nil {
		e.t.Fatal(err)
	}
	var runs []*sdk.Run[string]
	for i := range n {
		r, err := sdk.Start(e.ctx, e.client, wf, i)
		if err != nil {
			e.t.Fatal(err)
		}
		runs = append(runs, r)
	}
	for range n {
		select {
		case <-running:
		case <-time.After(20 * time.Second):
			e.t.Fatal("the worker did not start every run")
		}
	}
	return w, runs
}
