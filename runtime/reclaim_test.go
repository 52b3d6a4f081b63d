package runtime_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/sdk"
)

// A worker that reclaims a run it still runs under an older lease (its lease
// ended while an attempt hung) stops the old execution at once: the
// heartbeat, which only renews the newest, would never tell it.
func TestReclaim_ByTheSameWorkerStopsItsOlderExecution(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := make(chan context.Context, 1)
	var calls int
	act := activities.New("work", func(ctx context.Context, x in) (int, error) {
		if calls++; calls == 1 {
			first <- ctx
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return x.N, nil
	})
	wf := oneStep(act)
	e.worker(e.config(), wf)
	run, err := sdk.Start(e.ctx, e.client, wf, in{N: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := <-first
	if err := e.store.ExpireLease(e.ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first attempt's context was not cancelled after the run was reclaimed")
	}
	if !errors.Is(context.Cause(ctx), activities.ErrLeaseLost) {
		t.Errorf("cause %v, want ErrLeaseLost", context.Cause(ctx))
	}
	if out, err := result(t, run); err != nil || out != 3 {
		t.Fatalf("Result = %d, %v", out, err)
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:lost", "1.2:succeeded"}) {
		t.Errorf("attempts = %v", got)
	}
}
