package operator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// flowEnv is a migrated schema with a running worker, a client and an
// operator.
type flowEnv struct {
	pool   *pgxpool.Pool
	schema string
	client *sdk.Client
	op     *operator.Operator
}

func newFlowEnv(t *testing.T, defs ...sdk.Definition) *flowEnv {
	t.Helper()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(pool, runtime.Config{Schema: schema, PollInterval: 20 * time.Millisecond,
		Label: "ops-test-worker", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(defs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	return &flowEnv{pool: pool, schema: schema, client: client, op: op}
}

// start starts a run of wf with input.
func start[In, Out any](t *testing.T, e *flowEnv, wf *sdk.Workflow[In, Out], in In) *sdk.Run[Out] {
	t.Helper()
	r, err := sdk.Start(t.Context(), e.client, wf, in)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// finish returns a run's result, failing the test after 20s.
func finish[Out any](t *testing.T, r *sdk.Run[Out]) Out {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := r.Result(ctx)
	if err != nil {
		t.Fatalf("run %s: %v", r.ID, err)
	}
	return out
}

// waitFor polls the downstream until ok holds, failing the test after 10s.
func (e *flowEnv) waitFor(t *testing.T, name, what string, ok func(d *operator.Operator) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(e.op) {
		if time.Now().After(deadline) {
			t.Fatalf("downstream %s: %s: not within 10s", name, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// audit is the audit_log rows of action, oldest first, as
// "actor|by|note|filter->what", what a jsonb path of the filter.
func (e *flowEnv) audit(t *testing.T, action, what string) []string {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), fmt.Sprintf(`
		SELECT actor || '|' || coalesce(filter->>'by', '') || '|' || coalesce(note, '') || '|' || coalesce(filter #>> '{%s}', '')
		FROM %s.audit_log WHERE action = $1 ORDER BY id`, what, pgx.Identifier{e.schema}.Sanitize()), action)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// role is the database role of the test's sessions: the audit's actor.
func (e *flowEnv) role(t *testing.T) string {
	t.Helper()
	var r string
	if err := e.pool.QueryRow(t.Context(), `SELECT session_user`).Scan(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	heldOpen = flow.New("held-open", flow.Concurrency(3))
	probeAct = activities.New("probe-held-open", func(ctx context.Context, n int) (int, error) { return n, nil },
		policy.MaxAttempts(1)).Calls(heldOpen, nil)
	probeWF = sdk.NewWorkflow("probe-held-open", func(ctx context.Context, n int) (int, error) {
		return sdk.Execute(ctx, probeAct, n)
	})
)

// TestOperator_RunWaitingOnAHandOpenedBreakerCompletesAfterClose: a breaker
// opened by hand holds the step (no attempt, nothing charged) for as long as
// it stays open, and closing it wakes the run; both changes are audited with
// the role and the note, and read back as the breaker's history.
func TestOperator_RunWaitingOnAHandOpenedBreakerCompletesAfterClose(t *testing.T) {
	e := newFlowEnv(t, probeWF)
	ctx := t.Context()
	finish(t, start(t, e, probeWF, 1)) // the downstream's row is written by its first call

	if err := e.op.OpenBreaker(ctx, "held-open", "INC-9: the API is down"); err != nil {
		t.Fatal(err)
	}
	r := start(t, e, probeWF, 2)
	e.waitFor(t, "held-open", "a step waits on the breaker", func(op *operator.Operator) bool {
		d, err := op.Downstream(ctx, "held-open")
		return err == nil && d.Waiting == 1
	})
	time.Sleep(300 * time.Millisecond) // an open breaker sends no probe: the run stays put
	d, err := e.op.Downstream(ctx, "held-open")
	if err != nil || d.Breaker != flow.BreakerOpen || !d.BreakerManual || d.OpenUntil != nil || d.Waiting != 1 || d.DeniedBreaker < 1 {
		t.Fatalf("downstream while open by hand: %+v, %v", d, err)
	}
	run, err := e.op.Run(ctx, r.ID)
	if err != nil || run.Status != "queued" || run.WaitingFor != "limit:held-open" {
		t.Fatalf("run while the breaker is open: %s waiting for %q, %v", run.Status, run.WaitingFor, err)
	}
	if hist, _ := e.op.History(ctx, r.ID); len(hist) != 0 {
		t.Fatalf("the held step made %d attempts, want none", len(hist))
	}

	if err := e.op.CloseBreaker(ctx, "held-open", "INC-9: the API is back"); err != nil {
		t.Fatal(err)
	}
	if got := finish(t, r); got != 2 {
		t.Fatalf("run output %d, want 2", got)
	}
	if d, _ := e.op.Downstream(ctx, "held-open"); d.Breaker != flow.BreakerClosed || d.BreakerManual || d.Waiting != 0 {
		t.Fatalf("downstream after the close: %+v", d)
	}

	role := e.role(t)
	want := []string{role + "|person|INC-9: the API is down|open", role + "|person|INC-9: the API is back|closed"}
	if got := e.audit(t, "breaker", "to"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("breaker audit rows %q, want %q", got, want)
	}
	hist, err := e.op.BreakerHistory(ctx, "held-open", 0)
	if err != nil || len(hist) != 2 || hist[0].To != flow.BreakerClosed || hist[0].From != flow.BreakerOpen ||
		hist[1].To != flow.BreakerOpen || hist[1].Why != "INC-9: the API is down" || hist[1].By != "person" || hist[1].Actor != role {
		t.Fatalf("breaker history: %+v, %v", hist, err)
	}
	if other, err := e.op.BreakerHistory(ctx, "another", 0); err != nil || len(other) != 0 {
		t.Fatalf("another downstream's history: %+v, %v", other, err)
	}
}

var tight = flow.New("tight", flow.Concurrency(1))

// TestOperator_SetLimitsAppliesAtOnceAndIsAudited: raising a concurrency
// limit by hand lets a waiting run start without waiting for the worker's
// sweep; the change and the reset are audited with the limits before and
// after, and a later declaration does not undo the change.
func TestOperator_SetLimitsAppliesAtOnceAndIsAudited(t *testing.T) {
	release := make(chan struct{})
	started := make(chan int, 4)
	act := activities.New("call-tight", func(ctx context.Context, n int) (int, error) {
		started <- n
		if n > 0 {
			<-release
		}
		return n, nil
	}, policy.MaxAttempts(1)).Calls(tight, nil)
	wf := sdk.NewWorkflow("tight", func(ctx context.Context, n int) (int, error) { return sdk.Execute(ctx, act, n) })
	e := newFlowEnv(t, wf)
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the worker's shutdown, should the test stop early
	ctx := t.Context()
	finish(t, start(t, e, wf, 0))
	<-started

	first, second := start(t, e, wf, 1), start(t, e, wf, 2)
	<-started // one holds the only slot
	e.waitFor(t, "tight", "the other waits", func(op *operator.Operator) bool {
		d, err := op.Downstream(ctx, "tight")
		return err == nil && d.Waiting == 1 && d.InUse == 1
	})
	limits, err := e.op.SetLimits(ctx, "tight", operator.LimitsChange{Concurrency: new(2), RetryRatio: new(0.5)}, "INC-10: more at once")
	if err != nil || limits.Concurrency != 2 || limits.RetryBudget == nil || limits.RetryBudget.Ratio != 0.5 || limits.RetryBudget.PerSecond != 10 {
		t.Fatalf("SetLimits: %v, %v", limits, err)
	}
	// Woken by the change itself, in its transaction: the worker's sweep,
	// about once a second, would do it too, later.
	var waiters int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{e.schema}.Sanitize()+`.flow_waiters`).Scan(&waiters); err != nil || waiters != 0 {
		t.Fatalf("%d runs still queued for a slot once SetLimits returned (%v): the change woke no one", waiters, err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting run did not start after the limit rose")
	}
	unblock()
	finish(t, first)
	finish(t, second)

	d, err := e.op.Downstream(ctx, "tight")
	if err != nil || !d.Overridden() || d.OverriddenBy != e.role(t) || d.Declared == nil || d.Declared.Concurrency != 1 ||
		d.DeclaredBy != "ops-test-worker" || d.Limits.String() != "concurrency 2, retries 50%+10/s" {
		t.Fatalf("downstream after SetLimits: %+v (limits %s), %v", d, d.Limits, err)
	}
	limits, err = e.op.ResetLimits(ctx, "tight", "INC-10 closed")
	if err != nil || limits.String() != "concurrency 1, retries 20%+10/s" {
		t.Fatalf("ResetLimits: %v, %v", limits, err)
	}
	if d, _ := e.op.Downstream(ctx, "tight"); d.Overridden() || d.Limits.Concurrency != 1 {
		t.Fatalf("downstream after ResetLimits: %+v", d)
	}
	role := e.role(t)
	want := []string{
		role + "|declaration by ops-test-worker||1",
		role + "|person|INC-10: more at once|2",
		role + "|reset to the declaration|INC-10 closed|1",
	}
	if got := e.audit(t, "limits", "after,concurrency"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("limits audit rows %q, want %q", got, want)
	}
}

// TestOperator_LimitsThatMakeNoSenseAreRefusedBeforeAnythingIsSent: each
// names the limit, wraps flow.ErrInvalid, and changes nothing; a
// downstream without a row is ErrNoDownstream for every action.
func TestOperator_LimitsThatMakeNoSenseAreRefusedBeforeAnythingIsSent(t *testing.T) {
	e := newFlowEnv(t, probeWF)
	ctx := t.Context()
	finish(t, start(t, e, probeWF, 1))
	ms := func(d time.Duration) *time.Duration { return &d }
	for _, c := range []struct {
		name   string
		change operator.LimitsChange
		want   string
	}{
		{"nothing", operator.LimitsChange{}, "the change sets and removes nothing"},
		{"zero concurrency", operator.LimitsChange{Concurrency: new(0)}, "concurrency = 0: at least 1, or remove the limit"},
		{"negative rate", operator.LimitsChange{Rate: new(-1)}, "rate = -1"},
		{"burst without a rate", operator.LimitsChange{Burst: new(3)}, "a rate interval or burst needs a rate"},
		{"interval below a millisecond", operator.LimitsChange{Rate: new(5), RateInterval: ms(500 * time.Microsecond)}, "rate interval = 500µs: a whole number of milliseconds"},
		{"interval not in milliseconds", operator.LimitsChange{Rate: new(5), RateInterval: ms(1500 * time.Microsecond)}, "rate interval = 1.5ms"},
		{"breaker ratio above 1", operator.LimitsChange{BreakerErrorRatio: new(1.5)}, "breaker error ratio (above 0, at most 1) = 1.5"},
		{"breaker settings without a breaker", operator.LimitsChange{BreakerMinCalls: new(5)}, "breaker settings need an error ratio"},
		{"retry ratio not a number", operator.LimitsChange{RetryRatio: new(math.NaN())}, "retry ratio = NaN: a finite number"},
		{"negative retry ratio", operator.LimitsChange{RetryRatio: new(-0.1)}, "retry budget ratio = -0.1"},
		{"set and removed", operator.LimitsChange{Concurrency: new(4), RemoveConcurrency: true}, "the concurrency is both set and removed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.op.SetLimits(ctx, "held-open", c.change, "")
			if !errors.Is(err, flow.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("SetLimits(%+v): %v; want flow.ErrInvalid saying %q", c.change, err, c.want)
			}
		})
	}
	if d, _ := e.op.Downstream(ctx, "held-open"); d.Overridden() || d.Limits.Concurrency != 3 {
		t.Fatalf("a refused change changed the downstream: %+v", d)
	}
	if got := e.audit(t, "limits", "after,concurrency"); len(got) != 1 {
		t.Fatalf("audit rows after refused changes: %q, want the declaration's alone", got)
	}

	for name, call := range map[string]func() error{
		"Downstream": func() error { _, err := e.op.Downstream(ctx, "nope"); return err },
		"SetLimits": func() error {
			_, err := e.op.SetLimits(ctx, "nope", operator.LimitsChange{Concurrency: new(1)}, "")
			return err
		},
		"ResetLimits":  func() error { _, err := e.op.ResetLimits(ctx, "nope", ""); return err },
		"OpenBreaker":  func() error { return e.op.OpenBreaker(ctx, "nope", "") },
		"CloseBreaker": func() error { return e.op.CloseBreaker(ctx, "nope", "") },
	} {
		if err := call(); !errors.Is(err, operator.ErrNoDownstream) || !strings.Contains(err.Error(), `"nope"`) {
			t.Errorf("%s of an unknown downstream: %v, want operator.ErrNoDownstream naming it", name, err)
		}
	}
}

// TestOperator_LimitsRemovedAndAddedByHand: every limit can be removed and
// added again; a rate or a retry budget added alone takes the database's
// defaults for its other settings.
func TestOperator_LimitsRemovedAndAddedByHand(t *testing.T) {
	e := newFlowEnv(t, probeWF)
	ctx := t.Context()
	finish(t, start(t, e, probeWF, 1))
	for _, c := range []struct {
		change operator.LimitsChange
		want   string
	}{
		{operator.LimitsChange{RemoveConcurrency: true, RemoveRetryBudget: true}, "no limits"},
		{operator.LimitsChange{Rate: new(30)}, "rate 30/1s burst 1"},
		{operator.LimitsChange{Burst: new(4), RateInterval: new(time.Minute)}, "rate 30/1m0s burst 4"},
		{operator.LimitsChange{RetryPerSecond: new(2.0)}, "rate 30/1m0s burst 4, retries 0%+2/s"},
		{operator.LimitsChange{BreakerErrorRatio: new(0.25), BreakerOpenFor: new(time.Second)}, "rate 30/1m0s burst 4, retries 0%+2/s, breaker 25% of 10 in 10s, open 1s"},
		{operator.LimitsChange{RemoveRate: true, RemoveBreaker: true, Concurrency: new(7)}, "concurrency 7, retries 0%+2/s"},
	} {
		got, err := e.op.SetLimits(ctx, "held-open", c.change, "")
		if err != nil || got.String() != c.want {
			t.Fatalf("SetLimits(%+v): %s, %v; want %s", c.change, got, err, c.want)
		}
		if d, _ := e.op.Downstream(ctx, "held-open"); d.Limits.String() != c.want {
			t.Fatalf("Downstream after SetLimits(%+v): %s, want %s", c.change, d.Limits, c.want)
		}
	}
	all, err := e.op.Downstreams(ctx)
	if err != nil || len(all) != 1 || all[0].Name != "held-open" || all[0].Admitted != 1 || all[0].Calls != 1 || all[0].Keys != 1 {
		t.Fatalf("Downstreams: %+v, %v", all, err)
	}
}
