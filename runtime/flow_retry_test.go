package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// TestFlow_OnlyAttemptsAfterAnErrorAreRetries: a step's first attempt is
// not charged to the retry budget, so that a burst of first attempts is
// never denied by it (the default budget holds 10 retries); its second
// attempt, after an error, is.
func TestFlow_OnlyAttemptsAfterAnErrorAreRetries(t *testing.T) {
	e := newEnv(t)
	ds := flow.New("budgeted") // the default retry budget, 20% + 10/s
	var mu sync.Mutex
	failed := map[int]bool{}
	act := activities.New("call-budgeted", func(ctx context.Context, x keyed) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if x.Key == "flaky" && !failed[x.N] {
			failed[x.N] = true
			return 0, errors.New("503")
		}
		return x.N, nil
	}, policy.MaxAttempts(3), policy.Constant(10*time.Millisecond)).Calls(ds, nil)
	wf := sdk.NewWorkflow("budgeted", func(ctx context.Context, x keyed) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(e.config(), wf)
	keys := []string{"flaky"}
	for range 30 {
		keys = append(keys, "")
	}
	for _, r := range startKeyed(t, e, wf, keys...) {
		if _, err := result(t, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := fscalar[int64](e, `SELECT retries FROM {schema}.downstream_status WHERE name = 'budgeted'`); got != 1 {
		t.Errorf("retries = %d, want 1: the one attempt after an error", got)
	}
	if got := fscalar[int64](e, `SELECT admitted FROM {schema}.downstream_status WHERE name = 'budgeted'`); got != 32 {
		t.Errorf("admitted = %d, want 32 (31 first attempts and a retry)", got)
	}
	if got := fscalar[int64](e, `SELECT denied_retry_budget FROM {schema}.downstream_status WHERE name = 'budgeted'`); got != 0 {
		t.Errorf("%d first attempts denied by the retry budget", got)
	}
}
