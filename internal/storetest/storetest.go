// Package storetest fabricates runs the way a worker leaves them, through the
// worker's own statements (insert, claim, fenced commits), so that tests and
// Examples of the operator's surface need no worker and no timing.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// Outcome describes a fabricated run: one step of Activity in a run of
// Workflow, Errors failed attempts, then success (Reason "") or a failure
// with Reason at the last of them.
type Outcome struct {
	Workflow, Activity string
	Key                string        // the run's key; "" for none
	Errors             int           // failed attempts before the end
	Reason             policy.Reason // "" completes the run; else fails it with this reason
}

// Run fabricates one run as o says and returns its ID.
func Run(ctx context.Context, st *store.Store, o Outcome) (uuid.UUID, error) {
	id := uuid.New()
	queue := "q-" + id.String()[:8] // a queue of its own, so the claim below takes this run
	run := store.NewRun{ID: id, Workflow: o.Workflow, Queue: queue, Key: o.Key, Input: []byte(`{"n":1}`)}
	if _, _, _, err := st.InsertRun(ctx, st.Pool(), run); err != nil {
		return id, err
	}
	claimed, err := st.Claim(ctx, []string{o.Workflow}, []string{queue}, 1, "test-worker", time.Minute)
	if err != nil || len(claimed) != 1 {
		return id, fmt.Errorf("claim: %v (%d runs)", err, len(claimed))
	}
	lease := store.Lease{RunID: id, Epoch: claimed[0].Epoch}
	pol, _ := json.Marshal(policy.Default())
	commit := func(w store.Write) error {
		w.Lease = lease
		res, err := st.Commit(ctx, st.Pool(), []store.Write{w})
		if err == nil {
			err = res[0].Err
		}
		return err
	}
	start := func(n int) error {
		return commit(store.Write{StartAttempt: &store.AttemptStart{Step: 1, Attempt: n, Activity: o.Activity,
			Policy: pol, Worker: "test-worker", TraceID: "trace-" + fmt.Sprint(n)}})
	}
	for n := 1; n <= o.Errors; n++ {
		if err := start(n); err != nil {
			return id, err
		}
		if o.Reason != "" && n == o.Errors {
			break
		}
		d := 10 * time.Millisecond
		if err := commit(store.Write{EndAttempt: &store.AttemptEnd{Step: 1, Attempt: n, Status: store.AttemptFailed,
			ErrorMessage: "boom", ErrorType: "*errors.errorString", Delay: &d, DelaySource: "jitter"}}); err != nil {
			return id, err
		}
	}
	if o.Reason == "" {
		if err := start(o.Errors + 1); err != nil {
			return id, err
		}
		return id, commit(store.Write{StepDone: &store.StepDone{Step: 1, Attempt: o.Errors + 1, Output: []byte(`1`)},
			CompleteRun: &store.RunOutput{Output: []byte(`1`)}})
	}
	end := &store.AttemptEnd{Step: 1, Attempt: o.Errors, Status: store.AttemptFailed, ErrorMessage: "boom", ErrorType: "*errors.errorString"}
	return id, commit(store.Write{
		FailStep: &store.StepFailure{Step: 1, Reason: o.Reason, ErrorMessage: "boom", ErrorType: "*errors.errorString", End: end},
		FailRun: &store.Failure{Reason: o.Reason, Step: 1, Activity: o.Activity,
			Attempts: o.Errors, Errors: o.Errors, ErrorMessage: "boom", ErrorType: "*errors.errorString"},
	})
}
