package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// callerTx is a fleet for the tests of what a caller's transaction can hold
// up: a worker with a lease of a second, and the workflows it runs.
type callerTx struct {
	*env
	cfg     runtime.Config
	w       *runtime.Worker
	long    *sdk.Workflow[int, int] // five checkpointed steps, then waits for the signal "go"
	quick   *sdk.Workflow[int, int] // one step
	fails   *sdk.Workflow[int, int] // fails at once the first time, completes when requeued
	hung    *sdk.Workflow[int, int] // hangs in its step on a worker that stops beating
	release func()
	errs    *dbErrors    // the database errors of c.w
	blocked atomic.Int64 // samples that found a session waiting for the caller's transaction
}

// dbErrors is an Observer (outcomes, batch_test.go) that also keeps the
// database errors a worker met (runtime.DatabaseObserver), by path, so that
// a test failing on one says which and why.
type dbErrors struct {
	outcomes
	mu   sync.Mutex
	errs []string
}

func (o *dbErrors) DatabaseError(path string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.errs = append(o.errs, path+": "+err.Error())
}

// all returns the errors kept, and whether each was a timeout.
func (o *dbErrors) all() (errs []string, timeouts bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	timeouts = true
	for _, e := range o.errs {
		timeouts = timeouts && (strings.Contains(e, "context deadline exceeded") || strings.Contains(e, "timeout"))
	}
	return slices.Clone(o.errs), timeouts
}

func newCallerTx(t *testing.T) *callerTx {
	e := newEnv(t)
	c := &callerTx{env: e}
	tick := activities.New("tick", func(ctx context.Context, n int) (int, error) {
		select {
		case <-time.After(150 * time.Millisecond):
			return n, nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	})
	c.long = sdk.NewWorkflow("long", func(ctx context.Context, n int) (int, error) {
		for i := range 5 {
			if _, err := sdk.Execute(ctx, tick, i); err != nil {
				return 0, err
			}
		}
		return sdk.Receive[int](ctx, "go", 0)
	})
	noop := activities.New("noop", func(ctx context.Context, n int) (int, error) { return n, nil })
	c.quick = sdk.NewWorkflow("quick", func(ctx context.Context, n int) (int, error) { return sdk.Execute(ctx, noop, n) })
	var failed atomic.Bool
	once := activities.New("once", func(ctx context.Context, n int) (int, error) {
		if failed.CompareAndSwap(false, true) {
			return 0, policy.Permanent(errors.New("not yet"))
		}
		return n, nil
	})
	c.fails = sdk.NewWorkflow("fails", func(ctx context.Context, n int) (int, error) { return sdk.Execute(ctx, once, n) })
	g := newGate(e)
	c.release = g.release
	hang := activities.New("hang", func(ctx context.Context, n int) (int, error) {
		if g.waiting.Load() == 0 {
			g.wait() // the first attempt: its worker froze
			return -1, nil
		}
		return n, nil
	})
	c.hung = sdk.NewWorkflow("hung", func(ctx context.Context, n int) (int, error) { return sdk.Execute(ctx, hang, n) })
	c.cfg = e.config()
	c.cfg.LeaseTTL, c.cfg.HeartbeatInterval = time.Second, 250*time.Millisecond
	c.errs = &dbErrors{}
	c.cfg.Observer = c.errs
	c.w = e.worker(c.cfg, c.long, c.quick, c.fails)
	return c
}

// hold is the time a caller's transaction stays open: two leases.
const hold = 2 * time.Second

// within fails the test unless cond holds before the caller's transaction,
// opened at opened, has been open for hold.
func (c *callerTx) within(t *testing.T, opened time.Time, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if time.Since(opened) > hold {
			t.Fatalf("while a caller's transaction was open for %s: not %s", hold, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// open begins a caller's transaction on the pool, rolled back at the end of
// the test unless committed. Until then, every 10 ms, it counts in c.blocked
// the samples that found any session waiting for a lock it holds.
func (c *callerTx) open(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := c.pool.Begin(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := tx.QueryRow(c.ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(c.ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			var n int
			err := c.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&n)
			if err == nil && n > 0 {
				c.blocked.Add(1)
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		stop()
		<-sampled
		_ = tx.Rollback(context.Background())
	})
	return tx
}

// waiting reports whether run id waits for its signal, every step before
// it checkpointed.
func (c *callerTx) waiting(id uuid.UUID) bool {
	return q[string](c.env, `SELECT coalesce(waiting_for, '') FROM {schema}.runs WHERE id = $1`, id) == "signal:go" &&
		q[int](c.env, `SELECT count(*) FROM {schema}.steps WHERE run_id = $1 AND status = 'completed'`, id) == 5
}

// endure checks, once the caller's transaction has been open longer than a
// lease, that no session waited for a lock it holds, and that the worker lost
// no lease and met no database error meanwhile. A statement timeout is not
// taken for a wait when no session was ever seen waiting: on a loaded
// machine (CI runs every package at once on 2 cores) a statement of the
// worker's can outlast its timeout of half a lease without waiting for the
// caller.
func (c *callerTx) endure(t *testing.T, opened time.Time) {
	t.Helper()
	if left := hold - time.Since(opened); left > 0 {
		time.Sleep(left)
	}
	if n := c.blocked.Load(); n > 0 {
		t.Fatalf("with a caller's transaction open for %s: %d samples found a session waiting for a lock it holds", hold, n)
	}
	st := c.w.Stats()
	errs, timeouts := c.errs.all()
	if st.LeasesLost != 0 || (len(errs) > 0 && !timeouts) {
		t.Fatalf("with a caller's transaction open for %s (leases of %s): stats %+v, database errors %q; want no lease lost and no database error",
			hold, c.cfg.LeaseTTL, st, errs)
	}
	if len(errs) > 0 {
		t.Logf("statement timeouts with no session waiting for the caller (a loaded machine): %q", errs)
	}
}

// A caller's transaction of any length holds up no worker: while what a
// caller writes in a transaction of its own (SendTx, StartTx, StartManyTx,
// a requeue, a cancel) stays open for two leases, the runs it concerns and
// the others keep their leases (renewed by the heartbeat), are checkpointed,
// suspended, claimed when due, rescued when their worker is gone, and
// cancelled without waiting for the caller; once it commits, what it did
// takes effect.
func TestCallerTransaction_OpenForLongerThanALeaseHoldsUpNoWorker(t *testing.T) {
	t.Parallel()
	t.Run("SendTx", func(t *testing.T) {
		t.Parallel()
		c := newCallerTx(t)
		// A run in its steps, one due soon, one whose worker freezes, one
		// to cancel: each is sent a signal in the open transaction.
		x, _ := sdk.Start(c.ctx, c.client, c.long, 1)
		y, _ := sdk.Start(c.ctx, c.client, c.long, 3)
		frozen := c.cfg
		frozen.LeaseTTL, frozen.HeartbeatInterval, frozen.Queues = time.Minute, 30*time.Second, []string{"frozen"}
		c.workerCtx(c.ctx, frozen, c.hung)
		r, _ := sdk.Start(c.ctx, c.client, c.hung, 4, sdk.WithQueue("frozen"))
		eventually(t, "the frozen worker's attempt", func() bool {
			return q[int](c.env, `SELECT count(*) FROM {schema}.attempts WHERE run_id = $1`, r.ID) == 1
		})
		// Started last, so that a slow start of the frozen worker cannot let
		// it end before it is sent its signal.
		d, _ := sdk.Start(c.ctx, c.client, c.quick, 2, sdk.WithDelay(300*time.Millisecond))
		tx := c.open(t)
		opened := time.Now()
		for _, id := range []uuid.UUID{x.ID, d.ID, y.ID, r.ID} {
			if err := c.client.SendTx(c.ctx, tx, id, "go", 10); err != nil {
				t.Fatal(err)
			}
		}
		c.expireLease(r.ID) // its worker is gone: the rescuer below takes it over
		rescuer := c.cfg
		rescuer.Queues = []string{"frozen"}
		c.worker(rescuer, c.hung)
		bounded, cancel := context.WithTimeout(c.ctx, time.Second)
		if err := c.client.Cancel(bounded, y.ID); err != nil {
			t.Fatalf("the cancel of a run sent a signal in an open transaction: %v; want it asked without waiting", err)
		}
		cancel()
		c.within(t, opened, "the due run claimed and completed", func() bool { return c.runStatus(d.ID) == "completed" })
		c.within(t, opened, "the frozen worker's run rescued and completed", func() bool { return c.runStatus(r.ID) == "completed" })
		c.within(t, opened, "the cancelled run ended", func() bool { return c.runStatus(y.ID) == "cancelled" })
		c.within(t, opened, "the run in its steps checkpointed and suspended", func() bool { return c.waiting(x.ID) })
		c.endure(t, opened)
		if err := tx.Commit(c.ctx); err != nil {
			t.Fatal(err)
		}
		if out, err := result(t, x); err != nil || out != 10 {
			t.Fatalf("the signalled run: %d, %v; want the signal's 10", out, err)
		}
		c.release()
	})

	t.Run("StartTx and StartManyTx", func(t *testing.T) {
		t.Parallel()
		c := newCallerTx(t)
		x, _ := sdk.Start(c.ctx, c.client, c.long, 1)
		tx := c.open(t)
		opened := time.Now()
		one, err := sdk.StartTx(c.ctx, c.client, tx, c.quick, 1)
		if err != nil {
			t.Fatal(err)
		}
		many, err := sdk.StartManyTx(c.ctx, c.client, tx, c.quick, []sdk.StartParams[int]{{Input: 2}, {Input: 3}})
		if err != nil {
			t.Fatal(err)
		}
		other, _ := sdk.Start(c.ctx, c.client, c.quick, 4)
		c.within(t, opened, "another run completed", func() bool { return c.runStatus(other.ID) == "completed" })
		c.within(t, opened, "the run in its steps checkpointed and suspended", func() bool { return c.waiting(x.ID) })
		c.endure(t, opened)
		if err := tx.Commit(c.ctx); err != nil {
			t.Fatal(err)
		}
		for _, r := range append(many, one) {
			if _, err := result(t, r); err != nil {
				t.Fatalf("a run started in the transaction: %v", err)
			}
		}
	})

	t.Run("requeue", func(t *testing.T) {
		t.Parallel()
		c := newCallerTx(t)
		f, _ := sdk.Start(c.ctx, c.client, c.fails, 7)
		if _, err := result(t, f); err == nil {
			t.Fatal("the run did not fail")
		}
		x, _ := sdk.Start(c.ctx, c.client, c.long, 1)
		tx := c.open(t)
		opened := time.Now()
		if _, err := tx.Exec(c.ctx, fmt.Sprintf(`SELECT %s.requeue_run($1, 'in a long transaction')`, c.schema), f.ID); err != nil {
			t.Fatal(err)
		}
		bounded, cancel := context.WithTimeout(c.ctx, time.Second)
		if err := c.client.Cancel(bounded, f.ID); !errors.Is(err, sdk.ErrFinished) {
			t.Fatalf("the cancel of a run being requeued in an open transaction: %v; want it answered without waiting: the run is failed", err)
		}
		cancel()
		c.within(t, opened, "the run in its steps checkpointed and suspended", func() bool { return c.waiting(x.ID) })
		c.endure(t, opened)
		if err := tx.Commit(c.ctx); err != nil {
			t.Fatal(err)
		}
		if out, err := result(t, f); err != nil || out != 7 {
			t.Fatalf("the requeued run: %d, %v", out, err)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		c := newCallerTx(t)
		x, _ := sdk.Start(c.ctx, c.client, c.long, 1)
		unstarted, _ := sdk.Start(c.ctx, c.client, c.quick, 2, sdk.WithDelay(time.Hour))
		eventually(t, "the run to start its steps", func() bool {
			return q[int](c.env, `SELECT count(*) FROM {schema}.attempts WHERE run_id = $1`, x.ID) > 0
		})
		tx := c.open(t)
		opened := time.Now()
		for _, id := range []uuid.UUID{x.ID, unstarted.ID} {
			if _, err := tx.Exec(c.ctx, fmt.Sprintf(`SELECT %s.cancel_run($1)`, c.schema), id); err != nil {
				t.Fatal(err)
			}
		}
		// Not cancelled until the caller commits: its steps go on, its
		// lease is renewed, and it suspends.
		c.within(t, opened, "the run in its steps checkpointed and suspended", func() bool { return c.waiting(x.ID) })
		bounded, cancel := context.WithTimeout(c.ctx, time.Second)
		if err := c.client.Cancel(bounded, unstarted.ID); err != nil {
			t.Fatalf("a second cancel of a run whose cancel is in an open transaction: %v; want it asked without waiting", err)
		}
		cancel()
		c.endure(t, opened)
		if err := tx.Commit(c.ctx); err != nil {
			t.Fatal(err)
		}
		for _, r := range []*sdk.Run[int]{x, unstarted} {
			if _, err := result(t, r); !errors.Is(err, sdk.ErrCancelled) {
				t.Fatalf("run %s after the cancel committed: %v, want ErrCancelled", r.ID, err)
			}
		}
	})
}
