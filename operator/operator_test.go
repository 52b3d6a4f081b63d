package operator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/faultproxy"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// newOperator returns an operator on a freshly migrated schema of its own.
func newOperator(t *testing.T) (*operator.Operator, func(...storetest.Outcome) []uuid.UUID, func(string) uuid.UUID) {
	t.Helper()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	return op,
		func(o ...storetest.Outcome) []uuid.UUID { return fabricate(pool, schema, o...) },
		func(wf string) uuid.UUID { return queue(t, pool, schema, wf) }
}

func TestNew_ReturnsConfigurationErrors(t *testing.T) {
	pool := pgtest.Pool(t)
	for _, tc := range []struct {
		name string
		new  func() (*operator.Operator, error)
		want string
	}{
		{"nil pool", func() (*operator.Operator, error) { return operator.New(nil) }, "nil pool"},
		{"invalid schema", func() (*operator.Operator, error) { return operator.New(pool, operator.WithSchema("Bad-Name")) }, `invalid schema name "Bad-Name"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, err := tc.new()
			if op != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, %v; want nil and an error containing %q", op, err, tc.want)
			}
		})
	}
}

func TestOperator_UnmigratedSchemaIsErrSchemaMissing(t *testing.T) {
	op, err := operator.New(pgtest.Pool(t), operator.WithSchema(pgtest.Schema(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Failures(t.Context(), operator.FailureFilter{}); !errors.Is(err, store.ErrSchemaMissing) {
		t.Fatalf("Failures on an unmigrated schema: %v, want store.ErrSchemaMissing", err)
	}
}

func TestOperator_FindsRunsByIDKeyAndFilter(t *testing.T) {
	op, fab, _ := newOperator(t)
	ids := fab(
		storetest.Outcome{Workflow: "orders", Activity: "charge", Key: "order-1", Errors: 3, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "import", Activity: "fetch"})
	ctx := t.Context()

	r, err := op.Run(ctx, ids[0])
	if err != nil || r.Status != record.RunFailed || r.Key != "order-1" || r.Failure == nil || r.Failure.Reason != sdk.ReasonRetriesExhausted {
		t.Fatalf("Run: %+v, %v", r, err)
	}
	if byKey, err := op.RunByKey(ctx, "order-1"); err != nil || byKey.ID != ids[0] {
		t.Fatalf("RunByKey: %v, %v; want run %s", byKey.ID, err, ids[0])
	}
	if _, err := op.Run(ctx, uuid.New()); !errors.Is(err, operator.ErrNotFound) {
		t.Fatalf("Run of an unknown ID: %v, want ErrNotFound", err)
	}
	if _, err := op.RunByKey(ctx, "no-such-key"); !errors.Is(err, operator.ErrNotFound) {
		t.Fatalf("RunByKey of an unknown key: %v, want ErrNotFound", err)
	}
	runs, err := op.Runs(ctx, operator.RunFilter{Status: record.RunFailed})
	if err != nil || len(runs) != 1 || runs[0].ID != ids[0] || runs[0].Activity != "charge" {
		t.Fatalf("Runs of failed runs: %+v, %v", runs, err)
	}
	steps, err := op.Steps(ctx, ids[0])
	if err != nil || len(steps) != 1 || steps[0].Status != record.StepFailed || steps[0].Reason != sdk.ReasonRetriesExhausted {
		t.Fatalf("Steps: %+v, %v", steps, err)
	}
	h, err := op.History(ctx, ids[1])
	if err != nil || len(h) != 1 || h[0].Status != record.AttemptSucceeded {
		t.Fatalf("History: %+v, %v", h, err)
	}
}

func TestOperator_FailuresAndCounts(t *testing.T) {
	op, fab, _ := newOperator(t)
	fab(
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "orders", Activity: "email", Errors: 1, Reason: sdk.ReasonNonRetryable})
	ctx := t.Context()

	fs, err := op.Failures(ctx, operator.FailureFilter{Reason: sdk.ReasonRetriesExhausted})
	if err != nil || len(fs) != 2 {
		t.Fatalf("Failures by reason: %d rows, %v; want 2", len(fs), err)
	}
	counts, err := op.FailureCounts(ctx, time.Hour, time.Now().Add(-time.Hour))
	if err != nil || len(counts) != 2 || counts[0].Activity != "charge" || counts[0].Failures != 2 || counts[0].StillOpen != 2 {
		t.Fatalf("FailureCounts: %+v, %v", counts, err)
	}
}

func TestOperator_RequeueCancelAndAudit(t *testing.T) {
	op, fab, queued := newOperator(t)
	ids := fab(
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 3, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "orders", Activity: "email"})
	ctx := t.Context()

	if err := op.Requeue(ctx, ids[0], "INC-7"); err != nil {
		t.Fatal(err)
	}
	if r, _ := op.Run(ctx, ids[0]); r.Status != record.RunQueued || r.Requeues != 1 {
		t.Fatalf("requeued run: %s after %d requeues, want queued after 1", r.Status, r.Requeues)
	}
	if err := op.Requeue(ctx, ids[1], ""); !errors.Is(err, operator.ErrNotFailed) {
		t.Fatalf("Requeue of a completed run: %v, want ErrNotFailed", err)
	}
	if _, err := op.RequeueFailures(ctx, operator.RequeueFilter{}, operator.RequeueOptions{}); !errors.Is(err, operator.ErrNoFilter) {
		t.Fatalf("RequeueFailures without a filter: %v, want ErrNoFilter", err)
	}
	id := queued("orders")
	if requested, err := op.Cancel(ctx, id, "INC-8"); err != nil || requested {
		t.Fatalf("Cancel of a queued run that never started: requested %v, %v; want it cancelled at once", requested, err)
	}
	if _, err := op.Cancel(ctx, id, "INC-8"); !errors.Is(err, operator.ErrFinished) {
		t.Fatalf("second Cancel: %v, want ErrFinished", err)
	}
	if _, err := op.Cancel(ctx, uuid.New(), ""); !errors.Is(err, operator.ErrNotFound) {
		t.Fatalf("Cancel of an unknown run: %v, want ErrNotFound", err)
	}
	audit, err := op.AuditLog(ctx, 0)
	// Newest first: the cancel (the refused ones wrote nothing), then the requeue.
	if err != nil || len(audit) != 2 || audit[0].Action != "cancel" || audit[0].Note != "INC-8" || audit[0].RunIDs[0] != id ||
		audit[1].Action != "requeue" || audit[1].Note != "INC-7" || audit[1].RunIDs[0] != ids[0] {
		t.Fatalf("AuditLog: %+v, %v", audit, err)
	}
}

// An unreachable database (a proxy that stops forwarding: no reset, just
// silence) cannot hold an operator's caller past the statement timeout.
func TestOperator_StatementTimeoutBoundsACallToASilentDatabase(t *testing.T) {
	t.Parallel()
	if _, err := operator.New(pgtest.Pool(t), operator.WithStatementTimeout(0)); err == nil {
		t.Fatal("New with a zero statement timeout: no error")
	}
	proxy, url, err := faultproxy.StartFor(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(func() { _ = proxy.Close() }) // first: it ends pgx's cancel requests in the black hole
	op, err := operator.New(pool, operator.WithStatementTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	began := time.Now()
	_, err = op.Run(t.Context(), uuid.New())
	if took := time.Since(began); !errors.Is(err, context.DeadlineExceeded) || took > 2*time.Second {
		t.Fatalf("Run on a silent database: %v after %s, want the deadline within about 300ms", err, took)
	}
}
