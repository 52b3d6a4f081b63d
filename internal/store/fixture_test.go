package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// newStore returns a store on a freshly migrated schema of its own.
func newStore(t testing.TB) *store.Store {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// history writes runs the way a worker does, through the store's own
// statements, so that tests of the operator surface need no worker.
type history struct {
	fatalf func(format string, args ...any) // t.Fatalf in tests, a panic in Examples
	st     *store.Store
}

func newHistory(t testing.TB, st *store.Store) history { return history{t.Fatalf, st} }

// exampleHistory is a history for Examples, which have no *testing.T.
func exampleHistory(st *store.Store) history {
	return history{func(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }, st}
}

// outcome of a fabricated run.
type outcome struct {
	workflow, activity string
	errors             int           // failed attempts before the end
	reason             policy.Reason // "" completes the run; else fails it with this reason
}

// run fabricates one run of o.workflow with one step of o.activity and
// returns its ID.
func (h history) run(o outcome) uuid.UUID {
	st := h.st
	ctx := context.Background()
	id := uuid.New()
	queue := "q-" + id.String()[:8] // a queue of its own, so the claim below takes this run
	if _, _, _, err := st.InsertRun(ctx, st.Pool(), store.NewRun{ID: id, Workflow: o.workflow, Queue: queue, Input: []byte(`{"n":1}`)}); err != nil {
		h.fatalf("%v", err)
	}
	claimed, err := st.Claim(ctx, []string{o.workflow}, []string{queue}, 1, "test-worker", time.Minute)
	if err != nil || len(claimed) != 1 {
		h.fatalf("claim: %v (%d runs)", err, len(claimed))
	}
	lease := store.Lease{RunID: id, Epoch: claimed[0].Epoch}
	pol, _ := json.Marshal(policy.Default())
	commit := func(w store.Write) {
		w.Lease = lease
		res, err := st.Commit(ctx, st.Pool(), []store.Write{w})
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			h.fatalf("%v", err)
		}
	}
	start := func(n int) {
		commit(store.Write{StartAttempt: &store.AttemptStart{Step: 1, Attempt: n, Activity: o.activity, Policy: pol, Worker: "test-worker", TraceID: "trace-" + fmt.Sprint(n)}})
	}
	for n := 1; n <= o.errors; n++ {
		start(n)
		if o.reason != "" && n == o.errors {
			break
		}
		d := 10 * time.Millisecond
		commit(store.Write{EndAttempt: &store.AttemptEnd{Step: 1, Attempt: n, Status: "failed", ErrorMessage: "boom", ErrorType: "*errors.errorString", Delay: &d, DelaySource: "jitter"}})
	}
	if o.reason == "" {
		start(o.errors + 1)
		commit(store.Write{StepDone: &store.StepDone{Step: 1, Attempt: o.errors + 1, Output: []byte(`1`)}, CompleteRun: &store.RunOutput{Output: []byte(`1`)}})
		return id
	}
	end := &store.AttemptEnd{Step: 1, Attempt: o.errors, Status: "failed", ErrorMessage: "boom", ErrorType: "*errors.errorString"}
	commit(store.Write{
		FailStep: &store.StepFailure{Step: 1, Reason: o.reason, ErrorMessage: "boom", ErrorType: "*errors.errorString", End: end},
		FailRun: &store.Failure{Reason: o.reason, Step: 1, Activity: o.activity,
			Attempts: o.errors, Errors: o.errors, ErrorMessage: "boom", ErrorType: "*errors.errorString"},
	})
	return id
}

// scalar runs a query returning one value; {schema} is the store's schema.
func scalar[T any](t testing.TB, st *store.Store, query string, args ...any) T {
	t.Helper()
	var v T
	q := replaceSchema(query, st.Schema())
	if err := st.Pool().QueryRow(context.Background(), q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}
