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
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

var echo = activities.New("echo", func(ctx context.Context, x in) (int, error) { return x.N, nil })

var echoWorkflow = sdk.NewWorkflow("echo", func(ctx context.Context, x in) (int, error) {
	return sdk.Execute(ctx, echo, x)
})

func TestStartTx_RunExistsIffTransactionCommits(t *testing.T) {
	e := newEnv(t)
	count := func() int { return scalar[int](e, fmt.Sprintf(`SELECT count(*) FROM %s.runs`, e.schema)) }

	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.StartTx(e.ctx, e.client, tx, echoWorkflow, in{N: 1}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d runs after rollback, want 0", n)
	}

	var run *sdk.Run[int]
	err = pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		run, err = sdk.StartTx(e.ctx, e.client, tx, echoWorkflow, in{N: 2})
		return err
	})
	if err != nil || count() != 1 {
		t.Fatalf("commit: %v, %d runs", err, count())
	}
	e.worker(e.config(), echoWorkflow)
	if out, err := result(t, run); err != nil || out != 2 {
		t.Fatalf("Result = %d, %v", out, err)
	}
}

func TestStart_SameKeyStartsOneRun(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	ids := make([]string, 10)
	created := atomic.Int32{}
	for i := range ids {
		wg.Go(func() {
			r, err := sdk.Start(e.ctx, e.client, echoWorkflow, in{N: 42}, sdk.WithKey("order-42"))
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = r.ID.String()
			if r.Created {
				created.Add(1)
			}
		})
	}
	wg.Wait()
	if distinct := slices.Compact(slices.Sorted(slices.Values(ids))); created.Load() != 1 || len(distinct) != 1 {
		t.Fatalf("10 concurrent Starts with one key: %d created, IDs %v", created.Load(), ids)
	}
	other := sdk.NewWorkflow("other", func(ctx context.Context, x in) (int, error) { return 0, nil })
	if _, err := sdk.Start(e.ctx, e.client, other, in{}, sdk.WithKey("order-42")); !errors.Is(err, sdk.ErrWorkflowMismatch) {
		t.Fatalf("same key, other workflow: %v", err)
	}
}

func TestRequeue_KeepsRunIDAndHistoryThenCompletes(t *testing.T) {
	e := newEnv(t)
	var fixed atomic.Bool
	act := activities.New("fragile", func(ctx context.Context, x in) (int, error) {
		if !fixed.Load() {
			return 0, errors.New("bug")
		}
		return x.N, nil
	}, policy.MaxAttempts(2), policy.Constant(time.Millisecond))
	wf := oneStep(act)
	e.worker(e.config(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 5})
	if _, err := result(t, run); err == nil {
		t.Fatal("want a failure first")
	}
	fixed.Store(true) // the fix is deployed
	if err := e.op.Requeue(e.ctx, run.ID, ""); err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, run); err != nil || out != 5 {
		t.Fatalf("after requeue Result = %d, %v", out, err)
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:failed", "1.2:failed", "1.3:succeeded"}) {
		t.Fatalf("history %v: want the old attempts kept and a fresh budget", got)
	}
	open, _ := e.op.Failures(e.ctx, operator.FailureFilter{RunID: run.ID})
	all, _ := e.op.Failures(e.ctx, operator.FailureFilter{RunID: run.ID, IncludeRequeued: true})
	if len(open) != 0 || len(all) != 1 || all[0].RequeuedAt == nil || all[0].RequeueCount != 1 {
		t.Fatalf("failure rows open=%v all=%+v: want one, marked requeued once", open, all)
	}
	if err := e.op.Requeue(e.ctx, run.ID, ""); !errors.Is(err, operator.ErrNotFailed) {
		t.Fatalf("requeue of a completed run: %v, want ErrNotFailed", err)
	}
}

func TestCancel_QueuedAndRunning(t *testing.T) {
	e := newEnv(t)
	queued, _ := sdk.Start(e.ctx, e.client, echoWorkflow, in{}, sdk.WithDelay(time.Hour))
	if err := e.client.Cancel(e.ctx, queued.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, queued); !errors.Is(err, sdk.ErrCancelled) {
		t.Fatalf("Result of cancelled run: %v", err)
	}
	if err := e.client.Cancel(e.ctx, queued.ID); !errors.Is(err, sdk.ErrFinished) {
		t.Fatalf("second cancel: %v, want ErrFinished", err)
	}

	started := make(chan struct{})
	var causes atomic.Value
	act := activities.New("waits", func(ctx context.Context, x in) (int, error) {
		close(started)
		<-ctx.Done()
		causes.Store(context.Cause(ctx))
		return 0, ctx.Err()
	})
	wf := oneStep(act)
	cfg := e.config()
	cfg.HeartbeatInterval = 50 * time.Millisecond
	w := e.worker(cfg, wf)
	running, _ := sdk.Start(e.ctx, e.client, wf, in{})
	<-started
	if err := e.client.Cancel(e.ctx, running.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, running); !errors.Is(err, sdk.ErrCancelled) {
		t.Fatalf("Result of the cancelled running run: %v, want ErrCancelled", err)
	}
	if c, _ := causes.Load().(error); !errors.Is(c, sdk.ErrCancelled) {
		t.Fatalf("activity context cause %v, want sdk.ErrCancelled", c)
	}
	if got := e.statuses(running.ID); !slices.Equal(got, []string{"1.1:cancelled"}) || e.runStatus(running.ID) != "cancelled" {
		t.Fatalf("attempts %v status %s", got, e.runStatus(running.ID))
	}
	// Counted once its worker has the commit's answer, just after Result.
	eventually(t, "the run's end counted", func() bool { return w.Stats().Cancelled == 1 })
	if st := w.Stats(); st.LeasesLost != 0 {
		t.Fatalf("stats %+v: want no lease lost", st)
	}
}

func TestBadInput_UndecodableInputFailsAtOnce(t *testing.T) {
	e := newEnv(t)
	// A producer built against an older version of the workflow sends a string.
	old := sdk.NewWorkflow("echo", func(ctx context.Context, s string) (int, error) { return 0, nil })
	run, err := sdk.Start(e.ctx, e.client, old, "not an object")
	if err != nil {
		t.Fatal(err)
	}
	e.worker(e.config(), echoWorkflow)
	_, err = result(t, run)
	var re *sdk.RunError
	if !errors.As(err, &re) || re.Reason != sdk.ReasonBadInput {
		t.Fatalf("Result error = %v, want bad_input", err)
	}
}

func TestUnknownWorkflow_WaitsQueuedForAWorkerThatHasIt(t *testing.T) {
	e := newEnv(t)
	nobody := sdk.NewWorkflow("not-deployed-yet", func(ctx context.Context, x in) (int, error) { return x.N, nil })
	run, _ := sdk.Start(e.ctx, e.client, nobody, in{N: 1})
	w := e.worker(e.config(), echoWorkflow)
	time.Sleep(300 * time.Millisecond)
	if s := e.runStatus(run.ID); s != "queued" || w.Stats().Claimed != 0 {
		t.Fatalf("run of an unregistered workflow is %q (claimed %d), want queued and untouched", s, w.Stats().Claimed)
	}
	e.worker(e.config(), nobody)
	if out, err := result(t, run); err != nil || out != 1 {
		t.Fatalf("Result = %d, %v", out, err)
	}
}

func TestBadInput_ClearErrors(t *testing.T) {
	e := newEnv(t)
	big := strings.Repeat("x", sdk.DefaultMaxPayload)
	bigWF := sdk.NewWorkflow("big", func(ctx context.Context, s string) (int, error) { return 0, nil })
	if _, err := sdk.Start(e.ctx, e.client, bigWF, big); !errors.Is(err, sdk.ErrPayloadTooLarge) {
		t.Errorf("oversized input: %v, want ErrPayloadTooLarge", err)
	}

	func() {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "max_attempts") {
				t.Errorf("invalid policy at declaration: panic %v, want one naming max_attempts", p)
			}
		}()
		activities.New("bad", func(ctx context.Context, x in) (int, error) { return 0, nil }, policy.MaxAttempts(0))
	}()

	wf := oneStep(echo, policy.Exponential(time.Second, 0.5, time.Minute)) // invalid per-call override
	e.worker(e.config(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{})
	_, err := result(t, run)
	var re *sdk.RunError
	if !errors.As(err, &re) || re.Reason != sdk.ReasonWorkflowError || !strings.Contains(re.Message, "factor") {
		t.Errorf("invalid per-call policy: %v, want a workflow_error naming the factor", err)
	}
	if h, _ := e.op.History(e.ctx, run.ID); len(h) != 0 {
		t.Errorf("an invalid policy ran %d attempts", len(h))
	}
}

func TestSchemaMissing_EveryEntryPointSaysRunMigrations(t *testing.T) {
	pool := pgtest.Pool(t)
	client, err := sdk.NewClient(pool, sdk.WithSchema("never_migrated"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	_, err = sdk.Start(t.Context(), client, echoWorkflow, in{})
	if !errors.Is(err, store.ErrSchemaMissing) || !strings.Contains(err.Error(), "run migrations") {
		t.Fatalf("Start: %v, want ErrSchemaMissing saying to run migrations", err)
	}
	op, err := operator.New(pool, operator.WithSchema("never_migrated"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Failures(t.Context(), operator.FailureFilter{}); !errors.Is(err, store.ErrSchemaMissing) {
		t.Fatalf("Failures: %v", err)
	}
	w, err := runtime.NewWorker(pool, runtime.Config{Schema: "never_migrated"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(echoWorkflow); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(t.Context()); !errors.Is(err, store.ErrSchemaMissing) {
		t.Fatalf("Worker.Run: %v, want ErrSchemaMissing", err)
	}
}

func TestMigrate_IdempotentConcurrentAndRefusesNewerSchema(t *testing.T) {
	e := newEnv(t) // already migrated once
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := store.Migrate(e.ctx, e.pool, store.WithSchema(e.schema)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if v, err := e.store.Version(e.ctx); err != nil || v != store.LatestVersion() {
		t.Fatalf("version %d, %v", v, err)
	}
	if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`INSERT INTO %s.schema_version (version, name) VALUES (9999, 'future')`, e.schema)); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(e.ctx, e.pool, store.WithSchema(e.schema)); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Migrate on a newer schema: %v, want ErrSchemaTooNew", err)
	}
	fresh, err := sdk.NewClient(e.pool, sdk.WithSchema(e.schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Close)
	if _, err := sdk.Start(e.ctx, fresh, echoWorkflow, in{}); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Start on a newer schema: %v, want ErrSchemaTooNew", err)
	}
	if err := store.Migrate(e.ctx, e.pool, store.WithSchema(`bad"name`)); err == nil {
		t.Fatal("Migrate accepted an invalid schema name")
	}
}

func TestResult_WaitersShareOneListenerAndHoldNoPooledConnection(t *testing.T) {
	e := newEnv(t)
	g := newGate(e)
	act := activities.New("slow", func(ctx context.Context, x in) (int, error) { g.wait(); return x.N, nil })
	wf := oneStep(act)
	wcfg := e.config()
	wcfg.Concurrency = 10
	e.worker(wcfg, wf)

	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // one pooled connection for ten waiters and a Start
	small, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(small.Close)
	// A poll interval longer than the test: only the notices can wake them.
	client, err := sdk.NewClient(small, sdk.WithSchema(e.schema), sdk.WithPollInterval(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)

	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range 10 {
		r, err := sdk.Start(e.ctx, client, wf, in{N: i})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
			defer cancel()
			if out, err := r.Result(ctx); err != nil || out != i {
				errs <- fmt.Errorf("run %d: %d, %v", i, out, err)
			}
		})
	}
	eventually(t, "ten attempts running", func() bool { return g.waiting.Load() == 10 })
	// With ten callers waiting, the client's one pooled connection is free.
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	if _, err := sdk.Start(ctx, client, echoWorkflow, in{}); err != nil {
		t.Fatalf("Start while ten Results wait: %v", err)
	}
	g.release()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
