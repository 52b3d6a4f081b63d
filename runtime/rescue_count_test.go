package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// A step that gave up on its lost attempt rescued one fewer than it lost,
// also when the workflow returns its error in a later segment, once the
// failed step has been loaded and replayed from its record: the failure
// row counts the rescues made whichever way it is written (budget.rescued).
func TestRescue_FailureRowCountsRescuesMadeAfterAReplay(t *testing.T) {
	e := newEnv(t)
	g := newGate(e)
	t.Cleanup(g.release)
	charge := activities.New("charge", func(ctx context.Context, x in) (int, error) {
		g.wait() // the attempt hangs its worker, whose lease then expires
		return x.N, nil
	}, policy.AtMostOnce())
	wf := sdk.NewWorkflow("pay-later", func(ctx context.Context, x in) (int, error) {
		n, err := sdk.Execute(ctx, charge, x)
		if errors.Is(err, sdk.ErrIndeterminate) {
			// A durable sleep: the run is released, and the next segment
			// replays the failed step from its record before it returns.
			if err := sdk.Sleep(ctx, 50*time.Millisecond); err != nil {
				return 0, err
			}
		}
		return n, err
	})
	e.worker(e.slowHeartbeat(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 3})
	eventually(t, "charge attempt", func() bool { return g.waiting.Load() == 1 })
	e.expireLease(run.ID)
	cfg := e.config()
	cfg.MaxInProcessSleep = 10 * time.Millisecond
	e.worker(cfg, wf)

	if _, err := result(t, run); !errors.Is(err, sdk.ErrIndeterminate) {
		t.Fatalf("Result error = %v, want indeterminate", err)
	}
	if got := e.statuses(run.ID); len(got) != 1 || got[0] != "1.1:lost" {
		t.Fatalf("attempts = %v, want the one lost charge", got)
	}
	if steps, _ := e.op.Steps(e.ctx, run.ID); len(steps) != 2 || steps[1].Kind != record.KindSleep {
		t.Fatalf("steps %+v, want the failed charge and the sleep it was replayed after", steps)
	}
	fs, _ := e.op.Failures(e.ctx, operator.FailureFilter{RunID: run.ID})
	if len(fs) != 1 || fs[0].Attempts != 1 || fs[0].Errors != 0 || fs[0].Rescues != 0 {
		t.Fatalf("failure rows %+v; want one of 1 attempt, 0 errors and 0 rescues", fs)
	}
}
