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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// slowHeartbeat is a worker that will not renew its lease before the test
// expires it: it stands for a worker that froze or was cut off.
func (e *env) slowHeartbeat() runtime.Config {
	cfg := e.config()
	cfg.LeaseTTL = time.Minute
	cfg.HeartbeatInterval = 30 * time.Second
	return cfg
}

func TestLease_ExpiredWorkerLosesRunAndItsCompletionIsRejected(t *testing.T) {
	e := newEnv(t)
	g := newGate(e)
	var calls atomic.Int32
	var firstCtx atomic.Value
	act := activities.New("work", func(ctx context.Context, x in) (int, error) {
		if calls.Add(1) == 1 {
			firstCtx.Store(ctx)
			g.wait() // frozen past its lease
			return -1, nil
		}
		return x.N, nil
	})
	wf := oneStep(act)
	a := e.worker(e.slowHeartbeat(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 7})
	eventually(t, "first attempt", func() bool { return g.waiting.Load() == 1 })

	e.expireLease(run.ID)
	b := e.worker(e.config(), wf)
	out, err := result(t, run)
	if err != nil || out != 7 {
		t.Fatalf("Result = %d, %v; want the second worker's 7", out, err)
	}

	g.release() // the first worker wakes up and tries to complete the step
	eventually(t, "first worker notices", func() bool { return a.Stats().LeasesLost == 1 })
	ctx := firstCtx.Load().(context.Context)
	if !errors.Is(context.Cause(ctx), activities.ErrLeaseLost) {
		t.Fatalf("first attempt's context cause = %v, want ErrLeaseLost", context.Cause(ctx))
	}
	if b.Stats().LeasesLost != 0 {
		t.Fatal("second worker lost a lease")
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:lost", "1.2:succeeded"}) {
		t.Fatalf("attempts = %v", got)
	}
	h, _ := e.op.History(e.ctx, run.ID)
	if h[0].Epoch >= h[1].Epoch || h[1].Epoch != e.epoch(run.ID) || !h[1].Rescue {
		t.Fatalf("epochs %d,%d (run %d) rescue %v; want the second claim's above the first's, and a rescue",
			h[0].Epoch, h[1].Epoch, e.epoch(run.ID), h[1].Rescue)
	}
	if o := scalar[int](e, fmt.Sprintf(`SELECT output::int FROM %s.runs WHERE id = $1`, e.schema), run.ID); o != 7 {
		t.Fatalf("recorded output %d: the stale worker's result was accepted", o)
	}
	// The rescue was charged to rescues, not to the retry budget.
	steps, err := e.store.Steps(e.ctx, run.ID)
	if err != nil || steps[1].Rescues != 1 || steps[1].Errors != 0 {
		t.Fatalf("step budgets %+v, %v; want 1 rescue, 0 errors", steps[1], err)
	}
}

func TestLease_HeartbeatKeepsALongAttemptOwned(t *testing.T) {
	e := newEnv(t)
	act := activities.New("long", func(ctx context.Context, x in) (int, error) {
		select {
		case <-time.After(1500 * time.Millisecond):
			return x.N, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	wf := oneStep(act)
	cfg := e.config()
	cfg.LeaseTTL, cfg.HeartbeatInterval = 400*time.Millisecond, 100*time.Millisecond
	w1 := e.worker(cfg, wf)
	w2 := e.worker(cfg, wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 5})
	if out, err := result(t, run); err != nil || out != 5 {
		t.Fatalf("Result = %d, %v", out, err)
	}
	if h, _ := e.op.History(e.ctx, run.ID); w1.Stats().LeasesLost+w2.Stats().LeasesLost != 0 || len(h) != 1 ||
		e.epoch(run.ID) != h[0].Epoch || w1.Stats().Claimed+w2.Stats().Claimed != 1 {
		t.Fatalf("lease changed hands during a heartbeated attempt (epoch %d, attempts %+v, claims %d)",
			e.epoch(run.ID), h, w1.Stats().Claimed+w2.Stats().Claimed)
	}
}

func TestRescue_ChargesMaxRescuesThenQuarantines(t *testing.T) {
	e := newEnv(t)
	g := newGate(e)
	act := activities.New("poison", func(ctx context.Context, x in) (int, error) {
		g.wait() // every attempt hangs its worker
		return 0, nil
	}, policy.MaxRescues(1), policy.MaxAttempts(1))
	wf := oneStep(act)
	cfg := e.slowHeartbeat()
	cfg.Concurrency = 1 // a hung worker takes no more work, like a dead one
	e.worker(cfg, wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{})
	eventually(t, "attempt 1", func() bool { return g.waiting.Load() == 1 })
	e.expireLease(run.ID)
	e.worker(cfg, wf) // rescues: attempt 2
	eventually(t, "attempt 2", func() bool { return g.waiting.Load() == 2 })
	e.expireLease(run.ID)
	e.worker(cfg, wf) // finds attempt 2 lost too: budget spent

	_, err := result(t, run)
	var re *sdk.RunError
	if !errors.As(err, &re) || re.Reason != sdk.ReasonRescuesExhausted {
		t.Fatalf("Result error = %v, want rescues_exhausted", err)
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:lost", "1.2:lost"}) {
		t.Fatalf("attempts = %v", got)
	}
	fs, _ := e.op.Failures(e.ctx, operator.FailureFilter{RunID: run.ID})
	// Attempt 2 rescued the lost attempt 1; attempt 2, lost too, was not
	// rescued: 1 rescue, whatever the number of attempts lost.
	if len(fs) != 1 || fs[0].Attempts != 2 || fs[0].Rescues != 1 || fs[0].Errors != 0 {
		t.Fatalf("failure rows %+v; want one of 2 attempts with 1 rescue and 0 errors (MaxAttempts 1 untouched)", fs)
	}
}

func TestRescue_AtMostOnceStepIsNeverRerun(t *testing.T) {
	for _, handled := range []bool{false, true} {
		t.Run(fmt.Sprintf("handled=%v", handled), func(t *testing.T) {
			e := newEnv(t)
			g := newGate(e)
			l := newLedger(e)
			charge := activities.New("charge", func(ctx context.Context, x in) (int, error) {
				if err := l.record(ctx, activities.IdempotencyKey(ctx)); err != nil {
					return 0, err
				}
				g.wait()
				return x.N, nil
			}, policy.AtMostOnce())
			reconcile := activities.New("reconcile", func(ctx context.Context, x in) (int, error) { return -x.N, nil })
			wf := sdk.NewWorkflow("pay", func(ctx context.Context, x in) (int, error) {
				n, err := sdk.Execute(ctx, charge, x)
				if handled && errors.Is(err, sdk.ErrIndeterminate) {
					return sdk.Execute(ctx, reconcile, x)
				}
				return n, err
			})
			e.worker(e.slowHeartbeat(), wf)
			run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 9})
			eventually(t, "charge attempt", func() bool { return g.waiting.Load() == 1 })
			e.expireLease(run.ID)
			e.worker(e.config(), wf)

			out, err := result(t, run)
			if handled {
				if err != nil || out != -9 {
					t.Fatalf("Result = %d, %v; want the reconcile path's -9", out, err)
				}
			} else {
				var re *sdk.RunError
				if !errors.As(err, &re) || re.Reason != sdk.ReasonIndeterminate || !errors.Is(err, sdk.ErrIndeterminate) {
					t.Fatalf("Result error = %v, want indeterminate", err)
				}
				// One attempt, lost and not rescued: no error, no rescue.
				fs, _ := e.op.Failures(e.ctx, operator.FailureFilter{RunID: run.ID})
				if len(fs) != 1 || fs[0].Attempts != 1 || fs[0].Errors != 0 || fs[0].Rescues != 0 {
					t.Fatalf("failure rows %+v; want one of 1 attempt, 0 errors and 0 rescues", fs)
				}
			}
			g.release()
			time.Sleep(50 * time.Millisecond)
			if n := l.count(run.ID.String() + "/1"); n != 1 {
				t.Fatalf("charge invoked %d times, want exactly 1", n)
			}
			if got := e.statuses(run.ID); got[0] != "1.1:lost" || slices.Contains(got, "1.2:running") || len(got) > 1 && got[1] == "1.2:succeeded" {
				t.Fatalf("attempts = %v; want the lost attempt and no second charge", got)
			}
		})
	}
}

func TestRescue_TransactionalStepRerunsAndCommitsOnce(t *testing.T) {
	e := newEnv(t)
	g := newGate(e)
	if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`CREATE TABLE %s.orders (n int)`, e.schema)); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	record := activities.NewTx("record-order", func(ctx context.Context, tx pgx.Tx, x in) (int, error) {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.orders VALUES ($1)`, e.schema), x.N); err != nil {
			return 0, err
		}
		if calls.Add(1) == 1 {
			g.wait() // frozen with its transaction open
		}
		return x.N, nil
	}) // a lost attempt never committed: it is rerun, never indeterminate
	wf := oneStep(record)
	a := e.worker(e.slowHeartbeat(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 11})
	eventually(t, "first attempt", func() bool { return g.waiting.Load() == 1 })
	e.expireLease(run.ID)
	e.worker(e.config(), wf)
	if out, err := result(t, run); err != nil || out != 11 {
		t.Fatalf("Result = %d, %v", out, err)
	}
	g.release()
	eventually(t, "stale worker fenced", func() bool { return a.Stats().LeasesLost == 1 })
	if n := scalar[int](e, fmt.Sprintf(`SELECT count(*) FROM %s.orders`, e.schema)); n != 1 {
		t.Fatalf("%d order rows, want exactly 1: the stale transaction must roll back", n)
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:lost", "1.2:succeeded"}) {
		t.Fatalf("attempts = %v", got)
	}
}

func TestRescue_BackstopFailsRunThatCrashesOutsideActivities(t *testing.T) {
	e := newEnv(t)
	g := newGate(e)
	wf := sdk.NewWorkflow("hangs", func(ctx context.Context, x in) (int, error) {
		g.wait() // workflow code itself wedges its worker
		return 0, nil
	}, sdk.WithMaxRescues(1))
	cfg := e.slowHeartbeat()
	cfg.Concurrency = 1
	e.worker(cfg, wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{})
	eventually(t, "first hold", func() bool { return g.waiting.Load() == 1 })
	e.expireLease(run.ID)
	e.worker(cfg, wf)
	eventually(t, "second hold", func() bool { return g.waiting.Load() == 2 })
	e.expireLease(run.ID)
	e.worker(cfg, wf)
	_, err := result(t, run)
	var re *sdk.RunError
	if !errors.As(err, &re) || re.Reason != sdk.ReasonRescuesExhausted || re.Step != 0 {
		t.Fatalf("Result error = %v, want rescues_exhausted with no step", err)
	}
}

func TestRequeue_IndeterminateRunInvokesTheAtMostOnceStepAgainByDecision(t *testing.T) {
	e := newEnv(t)
	g := newGate(e)
	l := newLedger(e)
	var calls atomic.Int32
	charge := activities.New("charge", func(ctx context.Context, x in) (int, error) {
		if err := l.record(ctx, activities.IdempotencyKey(ctx)); err != nil {
			return 0, err
		}
		if calls.Add(1) == 1 {
			g.wait()
		}
		return x.N, nil
	}, policy.AtMostOnce())
	wf := oneStep(charge)
	e.worker(e.slowHeartbeat(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 3})
	eventually(t, "charge attempt", func() bool { return g.waiting.Load() == 1 })
	e.expireLease(run.ID)
	e.worker(e.config(), wf)
	if _, err := result(t, run); !errors.Is(err, sdk.ErrIndeterminate) {
		t.Fatalf("Result error = %v, want indeterminate", err)
	}
	// An operator checked with the provider: the charge did not go through.
	if err := e.op.Requeue(e.ctx, run.ID, ""); err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, run); err != nil || out != 3 {
		t.Fatalf("after requeue Result = %d, %v", out, err)
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:lost", "1.2:succeeded"}) {
		t.Fatalf("attempts = %v", got)
	}
	h, _ := e.op.History(e.ctx, run.ID)
	if h[1].Rescue {
		t.Fatal("the attempt after a requeue is a fresh start, not a rescue")
	}
	if n := l.count(run.ID.String() + "/1"); n != 2 {
		t.Fatalf("charge invoked %d times, want 2: once lost, once after the requeue", n)
	}
}

func TestRescue_ActivityCrashIsChargedToTheStepNotTheWorkflowBackstop(t *testing.T) {
	e := newEnv(t)
	g := newGate(e)
	var calls atomic.Int32
	act := activities.New("export", func(ctx context.Context, x in) (int, error) {
		if calls.Add(1) == 1 {
			g.wait()
		}
		return x.N, nil
	}, policy.MaxRescues(1))
	// A workflow with no backstop budget at all: only crashes outside
	// activities may fail it.
	wf := sdk.NewWorkflow("strict", func(ctx context.Context, x in) (int, error) { return sdk.Execute(ctx, act, x) }, sdk.WithMaxRescues(0))
	e.worker(e.slowHeartbeat(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 4})
	eventually(t, "first attempt", func() bool { return g.waiting.Load() == 1 })
	e.expireLease(run.ID)
	e.worker(e.config(), wf)
	if out, err := result(t, run); err != nil || out != 4 {
		t.Fatalf("Result = %d, %v; want the step's rescue to complete the run", out, err)
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:lost", "1.2:succeeded"}) {
		t.Fatalf("attempts = %v", got)
	}
}

func TestLease_HeartbeatIsNotStarvedByActivitiesHoldingThePool(t *testing.T) {
	e := newEnv(t)
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2 // two transactional activities hold every pooled connection
	small, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(small.Close)

	var started atomic.Int32
	hold := activities.NewTx("hold", func(ctx context.Context, tx pgx.Tx, x in) (int, error) {
		started.Add(1)
		time.Sleep(1200 * time.Millisecond) // keeps its pooled connection, three lease TTLs long
		return x.N, nil
	})
	wf := oneStep(hold)
	wcfg := e.config()
	wcfg.Concurrency = 4
	wcfg.LeaseTTL, wcfg.HeartbeatInterval = 400*time.Millisecond, 100*time.Millisecond
	w1, err := runtime.NewWorker(small, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w1.Register(wf); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w1.Run(context.WithoutCancel(e.ctx)) }()
	t.Cleanup(func() { stop(t, w1, 10*time.Second); <-done })

	var runs []*sdk.Run[int]
	for i := range 4 {
		r, _ := sdk.Start(e.ctx, e.client, wf, in{N: i})
		runs = append(runs, r)
	}
	eventually(t, "activities holding connections", func() bool { return started.Load() >= 2 })
	e.worker(e.config(), wf) // would take over any lease the first worker failed to renew
	for i, r := range runs {
		if out, err := result(t, r); err != nil || out != i {
			t.Fatalf("run %d: %d, %v", i, out, err)
		}
	}
	if lost := w1.Stats().LeasesLost; lost != 0 {
		t.Fatalf("%d leases lost while activities held the pool: the heartbeat was starved", lost)
	}
}

// A worker that learns its attempt is recorded only after its lease ran
// out (its process paused between the commit and the call: SIGSTOP, a
// stall, a slow network) does not make the call: another worker may hold
// the run by now, and the sweep may have given the attempt's capacity to
// another call (the chaos test saw three calls in flight under a limit of
// two, one of them made 1.3 s after its attempt's start). The attempt is
// lost, and rescued; the call is made once, by the rescue.
func TestLease_AnAttemptRecordedAfterTheLeaseRanOutIsNotCalled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("call", func(ctx context.Context, x in) (int, error) {
		calls.Add(1)
		return x.N, nil
	})
	wf := oneStep(act)
	stall := &stallAfterStart{stalled: make(chan struct{}), resume: make(chan struct{})}
	cfg := e.config()
	cfg.LeaseTTL, cfg.HeartbeatInterval = 2*time.Second, 500*time.Millisecond
	w, err := runtime.NewWorker(e.tracedPool(t, stall), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(wf); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.WithoutCancel(e.ctx)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stall.release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
	run, err := sdk.Start(e.ctx, e.client, wf, in{N: 5})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-stall.stalled: // the attempt's start committed; the worker does not know yet
	case <-time.After(20 * time.Second):
		t.Fatal("the attempt's start was never sent")
	}
	// No renewal gets through meanwhile: the run's row is held FOR SHARE
	// (which the attempt's start, FOR KEY SHARE, did not wait for).
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(e.ctx)) }() // a no-op once committed
	if _, err := tx.Exec(e.ctx, fmt.Sprintf(`SELECT 1 FROM %s.runs WHERE id = $1 FOR SHARE`, e.schema), run.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the lease to run out by the worker's clock", func() bool { return w.Stats().LeasesLost == 1 })
	stall.release()
	time.Sleep(200 * time.Millisecond) // the worker hears of its start, and would call
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d calls after the lease ran out by the worker's clock, want none", n)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, run); err != nil || out != 5 {
		t.Fatalf("Result = %d, %v", out, err)
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:lost", "1.2:succeeded"}) {
		t.Fatalf("attempts = %v, want the one recorded after the lease ran out lost, then its rescue", got)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls, want 1: the attempt recorded after the lease ran out was called", n)
	}
}

// stallAfterStart stalls the connection that sends the first attempt's
// start, once, after that batch has committed and before its results are
// read, until release.
type stallAfterStart struct {
	once    sync.Once
	stalled chan struct{}
	resume  chan struct{}
	done    sync.Once
}

func (s *stallAfterStart) release() { s.done.Do(func() { close(s.resume) }) }

func (s *stallAfterStart) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (s *stallAfterStart) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *stallAfterStart) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (s *stallAfterStart) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	// A batch commits once the server has run all of it (its Sync), before
	// its results are read: this one's attempt row is already committed.
	if !strings.Contains(d.SQL, "AS x(run_id, epoch, step, attempt, activity, policy, rescue") {
		return
	}
	s.once.Do(func() {
		close(s.stalled)
		<-s.resume
	})
}
func (s *stallAfterStart) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
