package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

type in struct{ N int }

// flaky fails its first `failures` calls with err, then returns its input doubled.
func flaky(calls *atomic.Int32, failures int32, err error) func(context.Context, in) (int, error) {
	return func(ctx context.Context, x in) (int, error) {
		if calls.Add(1) <= failures {
			return 0, err
		}
		return x.N * 2, nil
	}
}

func oneStep(act *activities.Activity[in, int], opts ...policy.Option) *sdk.Workflow[in, int] {
	return sdk.NewWorkflow("one-step", func(ctx context.Context, x in) (int, error) {
		return sdk.Execute(ctx, act, x, opts...)
	})
}

func TestRetry_UntilSuccessRecordsEveryAttempt(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("flaky", flaky(&calls, 2, errors.New("boom")),
		policy.MaxAttempts(5), policy.Constant(30*time.Millisecond), policy.Jitter(policy.NoJitter))
	wf := oneStep(act)
	e.worker(e.config(), wf)

	run, err := sdk.Start(e.ctx, e.client, wf, in{N: 21})
	if err != nil {
		t.Fatal(err)
	}
	out, err := result(t, run)
	if err != nil || out != 42 {
		t.Fatalf("Result = %d, %v; want 42, nil", out, err)
	}
	h, err := e.op.History(e.ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := e.statuses(run.ID), []string{"1.1:failed", "1.2:failed", "1.3:succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("attempts = %v, want %v", got, want)
	}
	for _, a := range h[:2] {
		if a.Delay == nil || *a.Delay != 30*time.Millisecond || a.DelaySource != "policy" || a.ErrorMessage != "boom" || a.ErrorType != "*errors.errorString" {
			t.Errorf("attempt %d: delay %v source %q error %q type %q", a.Attempt, a.Delay, a.DelaySource, a.ErrorMessage, a.ErrorType)
		}
		if a.EndedAt == nil || a.Worker == "" || a.Epoch != h[2].Epoch || a.Rescue { // one claim
			t.Errorf("attempt %d: ended %v worker %q epoch %d rescue %v", a.Attempt, a.EndedAt, a.Worker, a.Epoch, a.Rescue)
		}
	}
	if h[2].Delay != nil {
		t.Errorf("succeeded attempt has a delay: %v", *h[2].Delay)
	}
	if got := calls.Load(); got != 3 {
		t.Errorf("invocations = %d, want 3", got)
	}
}

func TestRetry_JitteredDelayIsRecordedWithItsSource(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("flaky", flaky(&calls, 1, errors.New("boom")),
		policy.Constant(200*time.Millisecond), policy.Jitter(policy.FullJitter))
	wf := oneStep(act)
	e.worker(e.config(), wf)
	run, err := sdk.Start(e.ctx, e.client, wf, in{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, run); err != nil {
		t.Fatal(err)
	}
	h, _ := e.op.History(e.ctx, run.ID)
	if h[0].Delay == nil || *h[0].Delay > 200*time.Millisecond || h[0].DelaySource != "jitter" {
		t.Fatalf("first attempt: delay %v source %q; want <= 200ms from jitter", h[0].Delay, h[0].DelaySource)
	}
}

func TestRetry_ExhaustedWritesFailureRowWithTheRunsFailure(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("always-fails", flaky(&calls, 1000, errors.New("upstream down")),
		policy.MaxAttempts(3), policy.Constant(10*time.Millisecond))
	wf := oneStep(act)
	e.worker(e.config(), wf)

	run, err := sdk.Start(e.ctx, e.client, wf, in{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = result(t, run)
	var re *sdk.RunError
	if !errors.As(err, &re) || re.Reason != sdk.ReasonRetriesExhausted || re.Step != 1 || re.Activity != "always-fails" || re.Message != "upstream down" {
		t.Fatalf("Result error = %#v, want retries_exhausted at step 1", err)
	}
	fs, err := e.op.Failures(e.ctx, operator.FailureFilter{Reason: sdk.ReasonRetriesExhausted})
	if err != nil || len(fs) != 1 {
		t.Fatalf("Failures = %v, %v; want one row", fs, err)
	}
	f := fs[0]
	if f.RunID != run.ID || f.Attempts != 3 || f.Errors != 3 || f.Rescues != 0 || f.Step != 1 || f.Workflow != "one-step" {
		t.Fatalf("failure row = %+v", f)
	}
	if calls.Load() != 3 {
		t.Fatalf("invocations = %d, want 3", calls.Load())
	}
	// The failure row and the run's status are written by one statement:
	// nowhere is a failed run without its row, or a row whose run is not failed.
	mismatched := scalar[int](e, fmt.Sprintf(`
		SELECT count(*) FROM %[1]s.runs r
		FULL JOIN %[1]s.failures f ON f.run_id = r.id AND f.requeued_at IS NULL
		WHERE (r.status = 'failed') IS DISTINCT FROM (f.id IS NOT NULL)`, e.schema))
	if mismatched != 0 {
		t.Fatalf("%d runs whose failed status and failure row disagree", mismatched)
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:failed", "1.2:failed", "1.3:failed"}) {
		t.Fatalf("attempts = %v", got)
	}
}

func TestRetry_PermanentErrorIsNotRetried(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("rejects", flaky(&calls, 1000, policy.Permanent(errors.New("card declined"))), policy.MaxAttempts(5))
	wf := oneStep(act)
	e.worker(e.config(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 1})
	_, err := result(t, run)
	var re *sdk.RunError
	if !errors.As(err, &re) || re.Reason != sdk.ReasonNonRetryable {
		t.Fatalf("Result error = %v, want non_retryable", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("invocations = %d, want 1", calls.Load())
	}
}

func TestRetry_RetryAfterHintIsHonouredAndRecorded(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("rate-limited", flaky(&calls, 1, policy.WithRetryAfter(errors.New("429"), 120*time.Millisecond)),
		policy.Exponential(5*time.Second, 2, time.Minute), policy.Jitter(policy.NoJitter))
	wf := oneStep(act)
	e.worker(e.config(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 1})
	if _, err := result(t, run); err != nil {
		t.Fatal(err)
	}
	h, _ := e.op.History(e.ctx, run.ID)
	if h[0].Delay == nil || *h[0].Delay != 120*time.Millisecond || h[0].DelaySource != "retry-after" {
		t.Fatalf("first attempt delay %v source %q, want 120ms retry-after", h[0].Delay, h[0].DelaySource)
	}
	gap := h[1].StartedAt.Sub(*h[0].EndedAt)
	if gap < 120*time.Millisecond {
		t.Fatalf("second attempt started %v after the first ended, before the hinted 120ms", gap)
	}
}

func TestRetry_PerCallOptionOverridesActivityDefault(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("always-fails", flaky(&calls, 1000, errors.New("no")), policy.MaxAttempts(5), policy.Constant(time.Millisecond))
	wf := oneStep(act, policy.MaxAttempts(2))
	e.worker(e.config(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 1})
	_, err := result(t, run)
	if !errors.As(err, new(*sdk.RunError)) || calls.Load() != 2 {
		t.Fatalf("Result error %v after %d calls, want failure after 2", err, calls.Load())
	}
	policyJSON := scalar[string](e, fmt.Sprintf(`SELECT policy::text FROM %s.steps WHERE run_id = $1`, e.schema), run.ID)
	var p policy.Retry
	if err := p.UnmarshalJSON([]byte(policyJSON)); err != nil || p.MaxAttempts != 2 {
		t.Fatalf("recorded policy %s (max attempts %d, %v), want the effective MaxAttempts 2", policyJSON, p.MaxAttempts, err)
	}
}

func TestRetry_LongBackoffSuspendsDurablyAndWorkflowCannotSwallowIt(t *testing.T) {
	e := newEnv(t)
	var calls, after atomic.Int32
	act := activities.New("slow-retry", flaky(&calls, 1, errors.New("later")),
		policy.Constant(1500*time.Millisecond), policy.Jitter(policy.NoJitter))
	wf := sdk.NewWorkflow("swallower", func(ctx context.Context, x in) (int, error) {
		defer func() { _ = recover() }() // cannot stop runtime.Goexit
		n, err := sdk.Execute(ctx, act, x)
		after.Add(1)
		return n, err
	})
	cfg := e.config()
	cfg.MaxInProcessSleep = 100 * time.Millisecond
	w := e.worker(cfg, wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 4})

	eventually(t, "suspension", func() bool { return w.Stats().Suspended == 1 })
	if s := e.runStatus(run.ID); s != "queued" {
		t.Fatalf("suspended run status %q, want queued", s)
	}
	if after.Load() != 0 {
		t.Fatal("workflow code ran past a suspended step")
	}
	held := scalar[bool](e, fmt.Sprintf(`SELECT claimant IS NOT NULL OR lease_expires_at IS NOT NULL OR run_after <= now() FROM %s.runs WHERE id = $1`, e.schema), run.ID)
	if held {
		t.Fatal("suspended run still holds a lease or is already due")
	}
	out, err := result(t, run)
	if err != nil || out != 8 {
		t.Fatalf("Result = %d, %v", out, err)
	}
	if after.Load() != 1 || calls.Load() != 2 {
		t.Fatalf("after=%d calls=%d, want 1 and 2", after.Load(), calls.Load())
	}
}

func TestRetry_AttemptTimeoutIsRecordedTimedOut(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("slow", func(ctx context.Context, x in) (int, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return x.N, nil
	}, policy.AttemptTimeout(50*time.Millisecond), policy.Constant(time.Millisecond))
	wf := oneStep(act)
	e.worker(e.config(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 3})
	if out, err := result(t, run); err != nil || out != 3 {
		t.Fatalf("Result = %d, %v", out, err)
	}
	if got := e.statuses(run.ID); !slices.Equal(got, []string{"1.1:timed_out", "1.2:succeeded"}) {
		t.Fatalf("attempts = %v", got)
	}
}

// rateLimited is an error type with a policy rule of its own.
type rateLimited struct{}

func (rateLimited) Error() string { return "429 too many requests" }

func TestRetry_ErrorRuleBudgetHoldsAcrossDurableSuspensions(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	act := activities.New("crm", func(ctx context.Context, x in) (int, error) {
		if calls.Add(1) <= 4 {
			return 0, rateLimited{}
		}
		return x.N, nil
	},
		policy.MaxAttempts(2), // everything else: two attempts
		policy.OnType[rateLimited](policy.MaxAttempts(6), policy.Constant(150*time.Millisecond), policy.Jitter(policy.NoJitter)),
	)
	wf := oneStep(act)
	cfg := e.config()
	cfg.MaxInProcessSleep = 10 * time.Millisecond // every rate-limit delay suspends the run
	w := e.worker(cfg, wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{N: 8})
	if out, err := result(t, run); err != nil || out != 8 {
		t.Fatalf("Result = %d, %v; want success on the 5th attempt under the rule's budget of 6", out, err)
	}
	if w.Stats().Suspended != 4 || calls.Load() != 5 {
		t.Fatalf("suspended %d times, %d calls; want 4 and 5", w.Stats().Suspended, calls.Load())
	}
}
