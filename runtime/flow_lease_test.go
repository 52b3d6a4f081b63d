package runtime_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/sdk"
)

// A slot held by a worker that froze is free once its lease expires: the
// worker's sweep wakes the run waiting for it, which runs while the frozen
// call is still stuck, and the frozen run is rescued.
func TestFlow_ASlotOfAnExpiredLeaseReturnsAndWakesTheWaiter(t *testing.T) {
	e := newEnv(t)
	g := newGate(e)
	ds := flow.New("sticky-api", flow.Concurrency(1))
	var calls atomic.Int32
	act := activities.New("call-sticky", func(ctx context.Context, x keyed) (int, error) {
		if calls.Add(1) == 1 {
			g.wait() // frozen past its lease, holding the slot
		}
		return x.N, nil
	}).Calls(ds, nil)
	wf := sdk.NewWorkflow("sticky", func(ctx context.Context, x keyed) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(e.slowHeartbeat(), wf)
	frozen := startKeyed(t, e, wf, "")[0]
	eventually(t, "the first call holds the slot", func() bool { return g.waiting.Load() == 1 })
	waiter := startKeyed(t, e, wf, "")[0]
	eventually(t, "the second run waits for the slot", func() bool {
		return fscalar[int64](e, `SELECT waiting FROM {schema}.downstream_status WHERE name = 'sticky-api'`) == 1
	})

	e.expireLease(frozen.ID)
	for _, r := range []*sdk.Run[int]{waiter, frozen} {
		if _, err := result(t, r); err != nil {
			t.Fatal(err)
		}
	}
	if g.waiting.Load() != 1 || calls.Load() != 3 {
		t.Fatalf("%d calls, %d frozen: want the frozen call, the waiter's and the rescue", calls.Load(), g.waiting.Load())
	}
	if got := e.statuses(frozen.ID); !slices.Equal(got, []string{"1.1:lost", "1.2:succeeded"}) {
		t.Errorf("frozen run's attempts %v", got)
	}
	if got := e.statuses(waiter.ID); !slices.Equal(got, []string{"1.1:succeeded"}) {
		t.Errorf("waiter's attempts %v: a wait is not an attempt", got)
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.throttles WHERE run_id = $1 AND cause = 'concurrency'`, waiter.ID); n != 1 {
		t.Errorf("the waiter has %d waits, want 1", n)
	}
	g.release()
}
