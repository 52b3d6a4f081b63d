package tenuretest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/tenuretest"
)

// The kit's worker, client and pool are long-lived components: none may
// outlive its test.
func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }

func newShop(t *testing.T, opts ...tenuretest.Option) *tenuretest.Env {
	t.Helper()
	env := tenuretest.New(t, append([]tenuretest.Option{tenuretest.Workflows(PlaceOrder)}, opts...)...)
	if _, err := env.Pool.Exec(context.Background(), ordersTable); err != nil {
		t.Fatal(err)
	}
	return env
}

func TestNew_RunsTheWorkflowInASchemaOfItsOwn(t *testing.T) {
	t.Parallel()
	a := newShop(t, tenuretest.Override(Charge, fakeCharge))
	b := newShop(t, tenuretest.Override(Charge, fakeCharge)) // its own orders table too
	if a.Schema == b.Schema {
		t.Fatalf("two envs share schema %s", a.Schema)
	}
	run := tenuretest.Start(a, PlaceOrder, Order{ID: "42", Cents: 1999})
	if out, err := tenuretest.Result(a, run); err != nil || out != "parcel-42" {
		t.Fatalf("Result = %q, %v", out, err)
	}
	if got := a.Timeline(run.ID); !slices.Equal(got, []string{"1.1 charge succeeded", "2.1 record-order succeeded", "3.1 ship succeeded"}) {
		t.Errorf("timeline %v", got)
	}
	var n int
	if err := a.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{a.Schema, "orders"}.Sanitize()).Scan(&n); err != nil || n != 1 {
		t.Errorf("orders in the env's schema: %d, %v", n, err)
	}
	if h := b.History(run.ID); len(h) != 0 {
		t.Errorf("another env sees the run's history: %v", h)
	}
	if _, err := sdk.Lookup(context.Background(), b.Client, PlaceOrder, run.ID); err == nil {
		t.Error("another env finds the run")
	}
}

// At the end of its test an env interrupts what its worker still runs,
// stops it, and drops its schema.
func TestNew_StopsTheWorkerAndDropsTheSchemaAtCleanup(t *testing.T) {
	t.Parallel()
	var env *tenuretest.Env
	var cause error
	t.Run("test", func(t *testing.T) {
		started := make(chan struct{})
		env = newShop(t, tenuretest.Override(Charge, func(ctx context.Context, o Order) (Receipt, error) {
			close(started)
			<-ctx.Done() // still running when the test ends
			cause = context.Cause(ctx)
			return Receipt{}, ctx.Err()
		}))
		tenuretest.Start(env, PlaceOrder, Order{ID: "1"})
		<-started
	})
	if !errors.Is(cause, activities.ErrWorkerShutdown) {
		t.Errorf("the running attempt's context ended with %v, want ErrWorkerShutdown", cause)
	}
	if err := env.Worker.Health(); !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("worker health after the test: %v", err)
	}
	probe := tenuretest.New(t)
	var exists bool
	if err := probe.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, env.Schema).Scan(&exists); err != nil || exists {
		t.Errorf("schema %s still exists (%v)", env.Schema, err)
	}
}

// Without workflows an env is a client on a migrated schema: runs wait.
func TestNew_WithoutWorkflowsHasNoWorker(t *testing.T) {
	t.Parallel()
	env := tenuretest.New(t)
	if env.Worker != nil {
		t.Fatal("a worker without workflows")
	}
	run := tenuretest.Start(env, PlaceOrder, Order{ID: "7"})
	if run.ID.String() == "" || !run.Created {
		t.Fatalf("run %+v", run)
	}
}

// An override replaces the function only: the activity's name is on its
// attempts, and its policy (MaxAttempts(3), permanent errors) applies.
func TestOverride_KeepsTheActivitysNameAndPolicy(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	env := newShop(t,
		tenuretest.Override(Charge, fakeCharge),
		tenuretest.Override(Ship, func(ctx context.Context, order string) (string, error) {
			if calls.Add(1) < 3 {
				return "", errors.New("carrier: 503")
			}
			if order == "refused" {
				return "", policy.Permanent(errors.New("carrier refuses the parcel"))
			}
			return "fake-parcel", nil
		}))
	run := tenuretest.Start(env, PlaceOrder, Order{ID: "1"})
	if out, err := tenuretest.Result(env, run); err != nil || out != "fake-parcel" {
		t.Fatalf("Result = %q, %v", out, err)
	}
	if got := env.Timeline(run.ID); !slices.Equal(got, []string{"1.1 charge succeeded", "2.1 record-order succeeded",
		"3.1 ship failed", "3.2 ship failed", "3.3 ship succeeded"}) {
		t.Errorf("timeline %v", got)
	}
	refused := tenuretest.Start(env, PlaceOrder, Order{ID: "refused"})
	f := env.RequireFailed(refused.ID, sdk.ReasonNonRetryable)
	if f.Activity != "ship" || f.Attempts != 1 || f.ErrorMessage != "carrier refuses the parcel" {
		t.Errorf("failure row %+v", f)
	}
}

// The last override of an activity wins: a test refines its helper's fakes.
func TestOverride_TheLastOneWins(t *testing.T) {
	t.Parallel()
	env := newShop(t, tenuretest.Override(Charge, fakeCharge),
		tenuretest.Override(Ship, func(context.Context, string) (string, error) { return "first", nil }),
		tenuretest.Override(Ship, func(context.Context, string) (string, error) { return "last", nil }))
	if out, err := tenuretest.Result(env, tenuretest.Start(env, PlaceOrder, Order{ID: "1"})); err != nil || out != "last" {
		t.Fatalf("Result = %q, %v; want the last override's", out, err)
	}
}

// A transactional activity's override gets the step's transaction: what it
// writes commits with the checkpoint, and rolls back with a failed attempt.
func TestOverrideTx_WritesCommitWithTheCheckpoint(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	env := newShop(t,
		tenuretest.Override(Charge, fakeCharge),
		tenuretest.OverrideTx(RecordOrder, func(ctx context.Context, tx pgx.Tx, r Receipt) (string, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id, payment) VALUES ($1, $2)`, r.Order, "override"); err != nil {
				return "", err
			}
			if calls.Add(1) == 1 {
				return "", errors.New("fails after its insert") // rolled back, then retried
			}
			return r.Order, nil
		}))
	run := tenuretest.Start(env, PlaceOrder, Order{ID: "9"})
	if _, err := tenuretest.Result(env, run); err != nil {
		t.Fatal(err)
	}
	rows, _ := env.Pool.Query(context.Background(), `SELECT payment FROM orders`)
	payments, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(payments, []string{"override"}) {
		t.Errorf("orders %v, %v; want the one row of the second attempt", payments, err)
	}
	if got := env.Timeline(run.ID); !slices.Equal(got[1:3], []string{"2.1 record-order failed", "2.2 record-order succeeded"}) {
		t.Errorf("timeline %v", got)
	}
}

// The crashed attempt is recorded lost and rescued; the stale worker's
// context is cancelled with ErrLeaseLost and what it returns is discarded.
func TestCrash_TheAttemptIsLostAndRescued(t *testing.T) {
	t.Parallel()
	started := make(chan context.Context, 1)
	var calls atomic.Int32
	env := newShop(t,
		tenuretest.Override(Charge, fakeCharge),
		tenuretest.Override(Ship, func(ctx context.Context, order string) (string, error) {
			if calls.Add(1) == 1 {
				started <- ctx
				<-ctx.Done()
				return "stale-parcel", nil // discarded: this worker crashed
			}
			return "parcel-" + order, nil
		}))
	run := tenuretest.Start(env, PlaceOrder, Order{ID: "5"})
	crashed := <-started
	env.Crash(run.ID)
	if out, err := tenuretest.Result(env, run); err != nil || out != "parcel-5" {
		t.Fatalf("Result = %q, %v", out, err)
	}
	if got := env.Timeline(run.ID); !slices.Equal(got[2:], []string{"3.1 ship lost", "3.2 ship succeeded rescue"}) {
		t.Errorf("timeline %v", got)
	}
	<-crashed.Done()
	if !errors.Is(context.Cause(crashed), activities.ErrLeaseLost) {
		t.Errorf("the crashed attempt's context ended with %v, want ErrLeaseLost", context.Cause(crashed))
	}
}

// A crash during an at-most-once attempt leaves its effect unknown: the
// function is not called again and the run fails as indeterminate.
func TestCrash_AnAtMostOnceStepIsIndeterminate(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	var calls atomic.Int32
	env := newShop(t, tenuretest.Override(Charge, func(ctx context.Context, o Order) (Receipt, error) {
		calls.Add(1)
		close(started)
		<-ctx.Done()
		return Receipt{}, ctx.Err()
	}))
	run := tenuretest.Start(env, PlaceOrder, Order{ID: "3"})
	<-started
	env.Crash(run.ID)
	f := env.RequireFailed(run.ID, sdk.ReasonIndeterminate)
	if f.Activity != "charge" || f.Step != 1 {
		t.Errorf("failure row %+v", f)
	}
	if _, err := tenuretest.Result(env, run); !errors.Is(err, sdk.ErrIndeterminate) {
		t.Errorf("Result error %v, want ErrIndeterminate", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("charge called %d times", n)
	}
}

// Crashes count against MaxRescues like real ones: two crashes of a step
// that may be rescued once quarantine the run.
func TestCrash_RepeatedCrashesExhaustTheRescueBudget(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 3)
	poison := activities.New("decode", func(ctx context.Context, n int) (int, error) {
		started <- struct{}{}
		<-ctx.Done()
		return 0, ctx.Err()
	}, policy.MaxRescues(1))
	wf := sdk.NewWorkflow("decode-image", func(ctx context.Context, n int) (int, error) {
		return sdk.Execute(ctx, poison, n)
	})
	env := tenuretest.New(t, tenuretest.Workflows(wf))
	run := tenuretest.Start(env, wf, 1)
	for range 2 {
		<-started
		env.Crash(run.ID)
	}
	f := env.RequireFailed(run.ID, sdk.ReasonRescuesExhausted)
	// Attempt 2 rescued attempt 1; nothing rescued attempt 2.
	if f.Rescues != 1 || f.Attempts != 2 {
		t.Errorf("failure row %+v", f)
	}
	if got := env.Timeline(run.ID); !slices.Equal(got, []string{"1.1 decode lost", "1.2 decode lost rescue"}) {
		t.Errorf("timeline %v", got)
	}
}

// A crash in workflow code, with no attempt running, is charged to the
// workflow's backstop budget: one crash more than WithMaxRescues fails the run.
func TestCrash_OutsideAnActivityIsChargedToTheWorkflowsBudget(t *testing.T) {
	t.Parallel()
	running := make(chan struct{}, 3)
	wf := sdk.NewWorkflow("hangs", func(ctx context.Context, n int) (int, error) {
		running <- struct{}{}
		<-ctx.Done() // stuck in workflow code, outside any activity
		return 0, ctx.Err()
	}, sdk.WithMaxRescues(1))
	env := tenuretest.New(t, tenuretest.Workflows(wf))
	run := tenuretest.Start(env, wf, 1)
	for range 2 {
		<-running
		env.Crash(run.ID)
	}
	f := env.RequireFailed(run.ID, sdk.ReasonRescuesExhausted)
	if f.Step != 0 || len(env.History(run.ID)) != 0 {
		t.Errorf("failure row %+v, attempts %v", f, env.Timeline(run.ID))
	}
}

func TestConfigure_ChangesTheWorkersConfig(t *testing.T) {
	t.Parallel()
	env := newShop(t, tenuretest.Override(Charge, fakeCharge),
		tenuretest.Configure(func(c *runtime.Config) { c.Label = "worker-under-test" }))
	run := tenuretest.Start(env, PlaceOrder, Order{ID: "8"})
	if _, err := tenuretest.Result(env, run); err != nil {
		t.Fatal(err)
	}
	if w := env.History(run.ID)[0].Worker; w != "worker-under-test" || env.Worker.Label() != w {
		t.Errorf("attempt recorded by %q", w)
	}
}

// fakeT is a TB that records how a test failed, to test the kit's failures.
type fakeT struct {
	t        *testing.T
	mu       sync.Mutex
	fatal    string
	errs     []string
	cleanups []func()
}

func (f *fakeT) Helper()                         {}
func (f *fakeT) Cleanup(fn func())               { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Logf(format string, args ...any) { f.t.Logf(format, args...) }
func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	goruntime.Goexit()
}

// failure runs fn as a test of its own, then its cleanups, and returns the
// message it failed with ("" when it passed).
func failure(t *testing.T, fn func(tb tenuretest.TB)) string {
	t.Helper()
	f := &fakeT{t: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	for _, c := range slices.Backward(f.cleanups) {
		c()
	}
	if len(f.errs) > 0 {
		t.Errorf("cleanup errors: %v", f.errs)
	}
	return f.fatal
}

func TestNew_FailsTheTestOnMisuse(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts []tenuretest.Option
		want string
	}{
		"OverrideTx of a plain activity": {[]tenuretest.Option{tenuretest.Workflows(PlaceOrder),
			tenuretest.OverrideTx(Ship, func(context.Context, pgx.Tx, string) (string, error) { return "", nil })},
			`OverrideTx("ship"): the activity is not transactional`},
		"nil function": {[]tenuretest.Option{tenuretest.Workflows(PlaceOrder), tenuretest.Override[Order, Receipt](Charge, nil)},
			`Override("charge"): nil function`},
		"no worker": {[]tenuretest.Option{tenuretest.Override(Charge, fakeCharge)},
			"no workflow is registered"},
		"timeout": {[]tenuretest.Option{tenuretest.Timeout(0)}, "Timeout(0s): must be positive"},
		"schema": {[]tenuretest.Option{tenuretest.Workflows(PlaceOrder), tenuretest.Configure(func(c *runtime.Config) { c.Schema = "tenure" })},
			`Configure set Schema "tenure"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			msg := failure(t, func(tb tenuretest.TB) { tenuretest.New(tb, tc.opts...) })
			if !strings.Contains(msg, tc.want) {
				t.Errorf("failed with %q, want it to say %q", msg, tc.want)
			}
		})
	}
}

// Result gives up after the env's Timeout and says why the run waits.
func TestResult_FailsTheTestWhenTheRunDoesNotEnd(t *testing.T) {
	t.Parallel()
	other := sdk.NewWorkflow("not-registered", func(ctx context.Context, n int) (int, error) { return n, nil })
	msg := failure(t, func(tb tenuretest.TB) {
		env := tenuretest.New(tb, tenuretest.Workflows(PlaceOrder), tenuretest.Timeout(200*time.Millisecond))
		tenuretest.Result(env, tenuretest.Start(env, other, 1))
	})
	for _, want := range []string{"did not end within 200ms", "status queued", `no worker of the env runs workflow "not-registered"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("failed with %q, want it to say %q", msg, want)
		}
	}
}

func TestRequireFailed_FailsTheTestOnAnotherOutcome(t *testing.T) {
	t.Parallel()
	msg := failure(t, func(tb tenuretest.TB) {
		env := tenuretest.New(tb, tenuretest.Workflows(PlaceOrder)) // the real charge fails every attempt
		env.RequireFailed(tenuretest.Start(env, PlaceOrder, Order{ID: "1"}).ID, sdk.ReasonIndeterminate)
	})
	if want := `failed with reason "retries_exhausted" (step 1, charge: payment provider unreachable from tests), want "indeterminate"`; !strings.Contains(msg, want) {
		t.Errorf("failed with %q, want it to say %q", msg, want)
	}
	msg = failure(t, func(tb tenuretest.TB) {
		wf := sdk.NewWorkflow("fine", func(ctx context.Context, n int) (int, error) { return n, nil })
		env := tenuretest.New(tb, tenuretest.Workflows(wf))
		env.RequireFailed(tenuretest.Start(env, wf, 1).ID, "")
	})
	if want := `completed, want it failed`; !strings.Contains(msg, want) {
		t.Errorf("failed with %q, want it to say %q", msg, want)
	}
}

func TestCrash_FailsTheTestForARunNotRunning(t *testing.T) {
	t.Parallel()
	msg := failure(t, func(tb tenuretest.TB) {
		env := tenuretest.New(tb)
		env.Crash(tenuretest.Start(env, PlaceOrder, Order{ID: "1"}).ID)
	})
	if want := "is queued: run is not running: no worker holds it"; !strings.Contains(msg, want) {
		t.Errorf("failed with %q, want it to say %q", msg, want)
	}
}
