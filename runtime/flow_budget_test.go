package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// A first attempt is not a retry: forty runs through a downstream with the
// default retry budget (a balance of 10) are all admitted at once, none
// charged to the budget.
func TestFlow_FirstAttemptsAreNotChargedToTheRetryBudget(t *testing.T) {
	e := newEnv(t)
	ds := flow.New("budgeted")
	act := activities.New("call-budgeted", func(ctx context.Context, x keyed) (int, error) { return x.N, nil }).Calls(ds, nil)
	wf := sdk.NewWorkflow("budgeted", func(ctx context.Context, x keyed) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(e.config(), wf)
	keys := make([]string, 40)
	for _, r := range startKeyed(t, e, wf, keys...) {
		if _, err := result(t, r); err != nil {
			t.Fatal(err)
		}
	}
	got := fscalar[string](e, `SELECT format('admitted %s, retries %s, denied by the budget %s', admitted, retries, denied_retry_budget)
		FROM {schema}.downstream_status WHERE name = 'budgeted'`)
	if want := "admitted 40, retries 0, denied by the budget 0"; got != want {
		t.Fatalf("%s; want %s", got, want)
	}
}

// Retries are charged: with a budget of 2 retries a second and no share of
// first attempts, a step's third quick retry waits for the balance to
// refill, without an attempt, and runs once it has.
func TestFlow_RetriesBeyondTheBudgetWait(t *testing.T) {
	e := newEnv(t)
	ds := flow.New("strict", flow.WithRetryBudget(0, 2))
	var calls atomic.Int32
	act := activities.New("call-strict", func(ctx context.Context, x keyed) (int, error) {
		if calls.Add(1) <= 3 {
			return 0, errors.New("503")
		}
		return x.N, nil
	}, policy.MaxAttempts(10), policy.Constant(time.Millisecond), policy.Jitter(policy.NoJitter)).Calls(ds, nil)
	wf := sdk.NewWorkflow("strict", func(ctx context.Context, x keyed) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(e.config(), wf)
	run := startKeyed(t, e, wf, "")[0]
	if _, err := result(t, run); err != nil {
		t.Fatal(err)
	}
	got := fscalar[string](e, `SELECT format('admitted %s, retries %s', admitted, retries) FROM {schema}.downstream_status WHERE name = 'strict'`)
	if want := "admitted 4, retries 3"; got != want {
		t.Errorf("%s; want %s", got, want)
	}
	if n := fscalar[int64](e, `SELECT denied_retry_budget FROM {schema}.downstream_status WHERE name = 'strict'`); n < 1 {
		t.Error("no retry waited for the budget")
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.attempts`); n != 4 {
		t.Errorf("%d attempts, want 4: a wait is not an attempt", n)
	}
	if by := fscalar[string](e, `SELECT coalesce(throttled_by, '') FROM {schema}.attempt_timeline WHERE attempt = 4`); by != flow.CauseRetryBudget {
		t.Errorf("attempt 4 throttled by %q, want %q", by, flow.CauseRetryBudget)
	}
}
