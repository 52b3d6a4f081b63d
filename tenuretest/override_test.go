package tenuretest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/tenuretest"
)

// An override runs with the attempt's context, as Override's comment and
// docs/testing.md promise: activities.InfoFrom describes the attempt and
// activities.IdempotencyKey is the step's key, the same on every attempt.
func TestOverride_SeesTheAttemptsInfoAndKey(t *testing.T) {
	t.Parallel()
	type seen struct {
		info activities.Info
		ok   bool
		key  string
	}
	var (
		mu    sync.Mutex
		calls []seen
	)
	env := newShop(t, tenuretest.Override(Charge, fakeCharge),
		tenuretest.Override(Ship, func(ctx context.Context, order string) (string, error) {
			info, ok := activities.InfoFrom(ctx)
			mu.Lock()
			calls = append(calls, seen{info, ok, activities.IdempotencyKey(ctx)})
			n := len(calls)
			mu.Unlock()
			if n == 1 {
				return "", errors.New("carrier: 503")
			}
			return "fake-parcel", nil
		}))
	run := tenuretest.Start(env, PlaceOrder, Order{ID: "1"})
	if out, err := tenuretest.Result(env, run); err != nil || out != "fake-parcel" {
		t.Fatalf("Result = %q, %v", out, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 {
		t.Fatalf("the override ran %d times, want 2", len(calls))
	}
	wantKey := fmt.Sprintf("%s/3", run.ID)
	for i, c := range calls {
		if !c.ok {
			t.Fatalf("call %d: activities.InfoFrom found no attempt info", i+1)
		}
		if c.info.RunID != run.ID || c.info.Workflow != "place-order" || c.info.Activity != "ship" ||
			c.info.Step != 3 || c.info.Attempt != i+1 || c.info.Errors != i {
			t.Errorf("call %d: info %+v", i+1, c.info)
		}
		if c.key != wantKey {
			t.Errorf("call %d: IdempotencyKey = %q, want %q", i+1, c.key, wantKey)
		}
	}
}
