package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// CardDeclined is an error of the user's own, with a field a workflow
// branches on, and one that JSON does not carry.
type CardDeclined struct {
	Code   string
	Detail string `json:"-"`
}

func (e *CardDeclined) Error() string { return "card declined: " + e.Code }

// A workflow that branches on errors.As of a registered error type takes the
// same branch when it is replayed after its worker froze mid-run as when the
// step gave up. Unregistered, the replay takes the other branch, as before,
// and Tenure notices the changed step (nondeterminism).
func TestErrorType_RegisteredErrorTakesTheSameBranchAfterAWorkerCrash(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []sdk.WorkflowOption
		paths      []string // the branch each execution took
		wantReason sdk.Reason
	}{
		{"registered", []sdk.WorkflowOption{sdk.WithErrorType[*CardDeclined]()}, []string{"declined insufficient_funds", "declined insufficient_funds"}, ""},
		{"unregistered", nil, []string{"declined insufficient_funds", "other"}, sdk.ReasonNondeterminism},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			g := newGate(e)
			charge := activities.New("charge", func(ctx context.Context, x in) (int, error) {
				return 0, fmt.Errorf("charge %d: %w", x.N, &CardDeclined{Code: "insufficient_funds"})
			}, policy.MaxAttempts(1))
			var notified atomic.Int32
			notify := activities.New("notify-declined", func(ctx context.Context, x in) (int, error) {
				if notified.Add(1) == 1 {
					g.wait() // the worker freezes past its lease
					return -1, nil
				}
				return x.N, nil
			})
			other := activities.New("other-failure", func(ctx context.Context, x in) (int, error) { return 0, nil })
			var mu sync.Mutex
			var paths []string
			took := func(p string) {
				mu.Lock()
				defer mu.Unlock()
				paths = append(paths, p)
			}
			wf := sdk.NewWorkflow("declines", func(ctx context.Context, x in) (int, error) {
				_, err := sdk.Execute(ctx, charge, x)
				var cd *CardDeclined
				if errors.As(err, &cd) {
					took("declined " + cd.Code)
					return sdk.Execute(ctx, notify, in{N: 7})
				}
				took("other")
				return sdk.Execute(ctx, other, x)
			}, tc.opts...)

			e.worker(e.slowHeartbeat(), wf)
			run, err := sdk.Start(e.ctx, e.client, wf, in{N: 1})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, "step 2's first attempt", func() bool { return g.waiting.Load() == 1 })
			e.expireLease(run.ID) // as if the worker had died: another one replays the run
			e.worker(e.config(), wf)
			out, err := result(t, run)
			var re *sdk.RunError
			switch {
			case tc.wantReason == "" && (err != nil || out != 7):
				t.Fatalf("Result = %d, %v; want 7 from the notify step", out, err)
			case tc.wantReason != "" && (!errors.As(err, &re) || re.Reason != tc.wantReason):
				t.Fatalf("Result = %d, %v; want %s", out, err, tc.wantReason)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(paths, tc.paths) {
				t.Fatalf("branches taken %q, want %q", paths, tc.paths)
			}
		})
	}
}

// The registered error is recorded where SQL reads it, its type name and its
// value as JSON, and the workflow sees that value decoded the first time
// too: a field JSON does not carry is empty then as on replay.
func TestErrorType_RegisteredErrorIsRecordedAsJSON(t *testing.T) {
	e := newEnv(t)
	charge := activities.New("charge", func(ctx context.Context, x in) (int, error) {
		return 0, policy.Permanent(fmt.Errorf("charge: %w", &CardDeclined{Code: "expired", Detail: "not recorded"}))
	})
	wf := sdk.NewWorkflow("declines", func(ctx context.Context, x in) (int, error) {
		_, err := sdk.Execute(ctx, charge, x)
		var cd *CardDeclined
		if !errors.As(err, &cd) {
			return 0, fmt.Errorf("want a *CardDeclined, got %w", err)
		}
		return len(cd.Code) + len(cd.Detail), nil
	}, sdk.WithErrorType[*CardDeclined]())
	e.worker(e.config(), wf)
	run, _ := sdk.Start(e.ctx, e.client, wf, in{})
	if out, err := result(t, run); err != nil || out != len("expired") {
		t.Fatalf("Result = %d, %v", out, err)
	}
	typ := scalar[string](e, fmt.Sprintf(`SELECT error_type FROM %s.steps WHERE run_id = $1 AND step = 1`, e.schema), run.ID)
	code := scalar[string](e, fmt.Sprintf(`SELECT error_value->>'Code' FROM %s.steps WHERE run_id = $1 AND step = 1`, e.schema), run.ID)
	if typ != "*runtime_test.CardDeclined" || code != "expired" {
		t.Fatalf("step 1 recorded error_type %q, error_value Code %q", typ, code)
	}
}
