package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

func TestReplay_CompletedStepsAreNotInvokedAgain(t *testing.T) {
	e := newEnv(t)
	var first, second atomic.Int32
	a := activities.New("first", func(ctx context.Context, x in) (int, error) { first.Add(1); return x.N + 1, nil })
	b := activities.New("second", flaky(&second, 1, errors.New("not yet")),
		policy.Constant(300*time.Millisecond), policy.Jitter(policy.NoJitter))
	wf := sdk.NewWorkflow("two-steps", func(ctx context.Context, x in) (int, error) {
		n, err := sdk.Execute(ctx, a, x)
		if err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, b, in{N: n})
	})
	cfg := e.config()
	cfg.MaxInProcessSleep = 10 * time.Millisecond // the retry suspends: step 1 is replayed after it
	w := e.worker(cfg, wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 1})
	if out, err := result(t, run); err != nil || out != 4 {
		t.Fatalf("Result = %d, %v; want 4", out, err)
	}
	if w.Stats().Claimed != 2 || w.Stats().Suspended != 1 {
		t.Fatalf("stats %+v: want two executions around one suspension", w.Stats())
	}
	if first.Load() != 1 || second.Load() != 2 {
		t.Fatalf("invocations first=%d second=%d; want 1 and 2", first.Load(), second.Load())
	}
}

func TestReplay_BudgetsSurviveAWorkerRestart(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("down", flaky(&calls, 1000, errors.New("down")),
		policy.MaxAttempts(3), policy.Constant(400*time.Millisecond), policy.Jitter(policy.NoJitter))
	wf := oneStep(act)
	cfg := e.config()
	cfg.MaxInProcessSleep = 10 * time.Millisecond

	w1 := e.worker(cfg, wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{})
	eventually(t, "first error", func() bool { return calls.Load() == 1 })
	eventually(t, "suspension", func() bool { return w1.Stats().Suspended == 1 })
	stop(t, w1, time.Second)

	e.worker(cfg, wf) // a new process: the budget continues from the history
	_, err := result(t, run)
	var re *sdk.RunError
	if !errors.As(err, &re) || re.Reason != sdk.ReasonRetriesExhausted {
		t.Fatalf("Result error = %v, want retries_exhausted", err)
	}
	if calls.Load() != 3 {
		t.Fatalf("invocations = %d across two workers, want MaxAttempts = 3", calls.Load())
	}
}

func TestReplay_ChangedActivityAtARecordedStepIsNondeterminism(t *testing.T) {
	e := newEnv(t)
	var version atomic.Int32
	var calls atomic.Int32
	a := activities.New("a", flaky(&calls, 1, errors.New("later")), policy.Constant(200*time.Millisecond), policy.Jitter(policy.NoJitter))
	b := activities.New("b", func(ctx context.Context, x in) (int, error) { return x.N, nil })
	wf := sdk.NewWorkflow("changes", func(ctx context.Context, x in) (int, error) {
		if version.Load() == 0 {
			return sdk.Execute(ctx, a, x)
		}
		return sdk.Execute(ctx, b, x) // a deploy changed step 1
	})
	cfg := e.config()
	cfg.MaxInProcessSleep = 10 * time.Millisecond
	w := e.worker(cfg, wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 1})
	eventually(t, "suspension", func() bool { return w.Stats().Suspended == 1 })
	version.Store(1)
	_, err := result(t, run)
	var re *sdk.RunError
	if !errors.As(err, &re) || re.Reason != sdk.ReasonNondeterminism || re.Step != 1 || !strings.Contains(re.Message, `"a"`) {
		t.Fatalf("Result error = %v, want nondeterminism at step 1", err)
	}
}

func TestPanic_InActivityAndWorkflowIsCapturedWithStack(t *testing.T) {
	e := newEnv(t)
	boom := activities.New("boom", func(ctx context.Context, x in) (int, error) { panic("nil map somewhere") }, policy.MaxAttempts(5))
	wfActivity := sdk.NewWorkflow("activity-panics", func(ctx context.Context, x in) (int, error) { return sdk.Execute(ctx, boom, x) })
	wfItself := sdk.NewWorkflow("workflow-panics", func(ctx context.Context, x in) (int, error) { panic("workflow bug") })
	e.worker(e.config(), wfActivity, wfItself)

	r1, _ := sdk.Start(e.ctx, e.client, wfActivity, in{})
	r2, _ := sdk.Start(e.ctx, e.client, wfItself, in{})
	for _, r := range []*sdk.Run[int]{r1, r2} {
		_, err := result(t, r)
		var re *sdk.RunError
		if !errors.As(err, &re) || re.Reason != sdk.ReasonPanic {
			t.Fatalf("Result error = %v, want panic", err)
		}
		fs, _ := e.op.Failures(e.ctx, operator.FailureFilter{RunID: r.ID})
		if len(fs) != 1 || (r == r2 && !strings.Contains(fs[0].ErrorStack, "goroutine")) {
			t.Fatalf("failure rows %+v: want one, with the workflow's stack", fs)
		}
	}
	h, _ := e.op.History(e.ctx, r1.ID)
	if len(h) != 1 || h[0].ErrorType != "panic" || !strings.Contains(h[0].ErrorStack, "replay_test.go") {
		t.Fatalf("activity panic attempts %+v: want one attempt with the stack (a panic is not retried)", h)
	}
}

func TestShutdown_InterruptsAttemptChargesNoBudgetAndHandsOver(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("long", func(ctx context.Context, x in) (int, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done() // honours cancellation at the end of the drain
			return 0, context.Cause(ctx)
		}
		return x.N, nil
	}, policy.MaxAttempts(1), policy.MaxRescues(0))
	wf := oneStep(act)
	w1 := e.worker(e.config(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 6})
	eventually(t, "attempt", func() bool { return calls.Load() == 1 })
	stop(t, w1, 200*time.Millisecond)
	if s := e.runStatus(run.ID); s != "queued" {
		t.Fatalf("after shutdown the run is %q, want queued for another worker", s)
	}
	h, _ := e.op.History(e.ctx, run.ID)
	if len(h) != 1 || h[0].Status != "interrupted" || !strings.Contains(h[0].ErrorMessage, "shutting down") {
		t.Fatalf("attempts %+v, want one interrupted", h)
	}

	e.worker(e.config(), wf)
	// MaxAttempts 1 and MaxRescues 0: only a free interruption lets it finish.
	if out, err := result(t, run); err != nil || out != 6 {
		t.Fatalf("Result = %d, %v", out, err)
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:interrupted", "1.2:succeeded"}) {
		t.Fatalf("attempts = %v", got)
	}
}

func TestShutdown_DrainLetsAttemptsFinish(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	a := activities.New("short", func(ctx context.Context, x in) (int, error) {
		calls.Add(1)
		time.Sleep(200 * time.Millisecond)
		return x.N, nil
	})
	b := activities.New("next", func(ctx context.Context, x in) (int, error) { return x.N * 10, nil })
	wf := sdk.NewWorkflow("two", func(ctx context.Context, x in) (int, error) {
		n, err := sdk.Execute(ctx, a, x)
		if err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, b, in{N: n})
	})
	w1 := e.worker(e.config(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 2})
	eventually(t, "attempt", func() bool { return calls.Load() == 1 })
	stop(t, w1, 5*time.Second)
	// Step 1 finished during the drain; step 2 was left for another worker.
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:succeeded"}) || e.runStatus(run.ID) != "queued" {
		t.Fatalf("after drain: attempts %v, status %s", got, e.runStatus(run.ID))
	}
	e.worker(e.config(), wf)
	if out, err := result(t, run); err != nil || out != 20 {
		t.Fatalf("Result = %d, %v", out, err)
	}
	if calls.Load() != 1 {
		t.Fatalf("step 1 invoked %d times", calls.Load())
	}
}

// A recorded step called with another input on replay is nondeterminism,
// named by its step, with nothing of it run again; with InputCheckWarn the
// step is replayed from its record and the run goes on.
func TestReplay_ChangedInputAtARecordedStepIsNondeterminism(t *testing.T) {
	for _, check := range []sdk.InputCheck{sdk.InputCheckFail, sdk.InputCheckWarn} {
		t.Run(string(check), func(t *testing.T) {
			e := newEnv(t)
			var version, firsts, seconds atomic.Int32
			a := activities.New("first", func(ctx context.Context, x in) (int, error) { firsts.Add(1); return x.N * 10, nil })
			b := activities.New("second", flaky(&seconds, 1, errors.New("later")), policy.Constant(200*time.Millisecond), policy.Jitter(policy.NoJitter))
			wf := sdk.NewWorkflow("input-changes-"+string(check), func(ctx context.Context, x in) (int, error) {
				arg := in{N: x.N}
				if version.Load() > 0 {
					arg.N++ // a deploy changed how step 1's input is computed
				}
				n, err := sdk.Execute(ctx, a, arg)
				if err != nil {
					return 0, err
				}
				return sdk.Execute(ctx, b, in{N: n})
			}, sdk.WithInputCheck(check))
			cfg := e.config()
			cfg.MaxInProcessSleep = 10 * time.Millisecond // step 2's retry suspends: step 1 is replayed after it
			w := e.worker(cfg, wf)
			run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 1})
			eventually(t, "suspension", func() bool { return w.Stats().Suspended == 1 })
			version.Store(1)
			out, err := result(t, run)
			if check == sdk.InputCheckWarn {
				if err != nil || out != 20 {
					t.Fatalf("Result = %d, %v; want 20, step 1 replayed from its record (10, doubled by step 2)", out, err)
				}
			} else {
				var re *sdk.RunError
				if !errors.As(err, &re) || re.Reason != sdk.ReasonNondeterminism || re.Step != 1 || !strings.Contains(re.Message, "input hash") {
					t.Fatalf("Result error = %v, want nondeterminism at step 1 naming its input", err)
				}
			}
			if firsts.Load() != 1 {
				t.Fatalf("step 1 invoked %d times, want once", firsts.Load())
			}
			if check == sdk.InputCheckWarn {
				return
			}
			// The failure row names the step and both hashes; after a
			// deploy that restores the input, a requeue completes the run.
			open, err := e.op.Failures(e.ctx, operator.FailureFilter{RunID: run.ID})
			if err != nil || len(open) != 1 || open[0].Reason != sdk.ReasonNondeterminism || open[0].Step != 1 ||
				!strings.Contains(open[0].ErrorMessage, "input hash") {
				t.Fatalf("failure rows %+v, %v; want one nondeterminism at step 1 naming the hashes", open, err)
			}
			version.Store(0)
			if err := e.op.Requeue(e.ctx, run.ID, "fixed the input"); err != nil {
				t.Fatal(err)
			}
			if out, err := result(t, run); err != nil || out != 20 {
				t.Fatalf("after the requeue: %d, %v; want 20", out, err)
			}
			if firsts.Load() != 1 {
				t.Fatalf("step 1 invoked %d times, want once", firsts.Load())
			}
		})
	}
}

// The input hash is recorded for every activity step; an unchanged input
// replays without a word.
func TestReplay_TheInputHashIsRecordedAndAnUnchangedInputReplays(t *testing.T) {
	e := newEnv(t)
	var seconds atomic.Int32
	a := activities.New("first", func(ctx context.Context, x in) (int, error) { return x.N + 1, nil })
	b := activities.New("second", flaky(&seconds, 1, errors.New("later")), policy.Constant(200*time.Millisecond), policy.Jitter(policy.NoJitter))
	wf := sdk.NewWorkflow("input-kept", func(ctx context.Context, x in) (int, error) {
		n, err := sdk.Execute(ctx, a, x)
		if err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, b, in{N: n})
	})
	cfg := e.config()
	cfg.MaxInProcessSleep = 10 * time.Millisecond
	w := e.worker(cfg, wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 1})
	if out, err := result(t, run); err != nil || out != 4 {
		t.Fatalf("Result = %d, %v; want 4", out, err)
	}
	if w.Stats().Suspended != 1 {
		t.Fatalf("stats %+v: want step 1 replayed after a suspension", w.Stats())
	}
	got := q[string](e, `SELECT count(DISTINCT input_hash) || ' of ' || count(*) FROM {schema}.steps WHERE run_id = $1`, run.ID)
	if got != "2 of 2" {
		t.Fatalf("distinct input hashes recorded: %s steps, want 2 of 2 (two inputs)", got)
	}
}

// An output passed on raw (json.RawMessage) comes back from jsonb on
// replay reordered and respaced; the step it feeds hashes its input alike
// and replays.
func TestReplay_ARawOutputPassedOnReplays(t *testing.T) {
	e := newEnv(t)
	raw := activities.New("raw", func(ctx context.Context, x in) (json.RawMessage, error) {
		return json.RawMessage(`{"bb":1,"a":"\u003cx\u003e"}`), nil
	})
	var takes atomic.Int32
	take := activities.New("take", func(ctx context.Context, m json.RawMessage) (int, error) { takes.Add(1); return len(m), nil })
	wf := sdk.NewWorkflow("raw-on", func(ctx context.Context, x in) (int, error) {
		m, err := sdk.Execute(ctx, raw, x)
		if err != nil {
			return 0, err
		}
		n, err := sdk.Execute(ctx, take, m)
		if err != nil {
			return 0, err
		}
		_, err = sdk.Receive[string](ctx, "go", 0)
		return n, err
	})
	w := e.worker(e.config(), wf)
	r := startWaiting(t, e, wf, in{N: 1})
	stop(t, w, 5*time.Second)
	e.worker(e.config(), wf) // replays both steps from their records
	if err := e.client.Send(e.ctx, r.ID, "go", "now"); err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, r); err != nil || takes.Load() != 1 {
		t.Fatalf("result error %v, step 2 invoked %d times; want the run completed, step 2 once", err, takes.Load())
	}
}

// A step that failed and that the workflow handled, then replayed with
// another input, fails the run nondeterminism; after the fix a requeue
// replays it from its record: the activity is not invoked again.
func TestReplay_ARequeueAfterNondeterminismInvokesNoRecordedStepAgain(t *testing.T) {
	e := newEnv(t)
	var version, charges, refunds atomic.Int32
	charge := activities.New("charge", func(ctx context.Context, x in) (int, error) {
		charges.Add(1)
		return 0, policy.Permanent(errors.New("declined"))
	})
	refund := activities.New("compensate", flaky(&refunds, 1, errors.New("later")), policy.Constant(200*time.Millisecond), policy.Jitter(policy.NoJitter))
	wf := sdk.NewWorkflow("charge-or-compensate", func(ctx context.Context, x in) (int, error) {
		arg := x
		arg.N += int(version.Load())
		if _, err := sdk.Execute(ctx, charge, arg); err == nil {
			return 1, nil
		}
		return sdk.Execute(ctx, refund, x) // the workflow handles the decline
	})
	cfg := e.config()
	cfg.MaxInProcessSleep = 10 * time.Millisecond // step 2's retry suspends: step 1 is replayed after it
	w := e.worker(cfg, wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 1})
	eventually(t, "suspension", func() bool { return w.Stats().Suspended == 1 })
	version.Store(1)
	var re *sdk.RunError
	if _, err := result(t, run); !errors.As(err, &re) || re.Reason != sdk.ReasonNondeterminism || re.Step != 1 {
		t.Fatalf("result error %v, want nondeterminism at step 1", err)
	}
	version.Store(0)
	if err := e.op.Requeue(e.ctx, run.ID, "input fixed"); err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, run); err != nil || out != 2 {
		t.Fatalf("after the requeue: %d, %v; want 2 (compensated)", out, err)
	}
	if charges.Load() != 1 {
		t.Fatalf("charge invoked %d times, want once", charges.Load())
	}
}
