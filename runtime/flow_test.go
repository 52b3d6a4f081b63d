package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// peak counts the calls in progress and the most seen at once.
type peak struct {
	mu        sync.Mutex
	now, most map[string]int
}

func newPeak() *peak { return &peak{now: map[string]int{}, most: map[string]int{}} }

func (p *peak) enter(k string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now[k]++
	p.most[k] = max(p.most[k], p.now[k])
}

func (p *peak) leave(k string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now[k]--
}

func (p *peak) max(k string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.most[k]
}

// fscalar is scalar with {schema} replaced by the test's schema.
func fscalar[T any](e *env, query string, args ...any) T {
	return scalar[T](e, strings.ReplaceAll(query, "{schema}", e.schema), args...)
}

type keyed struct {
	Key string
	N   int
}

func startKeyed(t *testing.T, e *env, wf *sdk.Workflow[keyed, int], keys ...string) []*sdk.Run[int] {
	t.Helper()
	var params []sdk.StartParams[keyed]
	for i, k := range keys {
		params = append(params, sdk.StartParams[keyed]{Input: keyed{Key: k, N: i}})
	}
	runs, err := sdk.StartMany(e.ctx, e.client, wf, params)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

func TestFlow_ConcurrencyLimitIsNeverExceededAndChargesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ds := flow.New("slow-api", flow.Concurrency(2))
	p := newPeak()
	act := activities.New("call-slow", func(ctx context.Context, x keyed) (int, error) {
		p.enter(x.Key)
		defer p.leave(x.Key)
		time.Sleep(50 * time.Millisecond)
		return x.N, nil
	}, policy.MaxAttempts(1)).Calls(ds, func(x keyed) string { return x.Key })
	wf := sdk.NewWorkflow("limited", func(ctx context.Context, x keyed) (int, error) {
		return sdk.Execute(ctx, act, x)
	})
	e.worker(e.config(), wf)
	e.worker(e.config(), wf)
	var keys []string
	for i := range 12 {
		keys = append(keys, []string{"a", "b"}[i%2])
	}
	for _, r := range startKeyed(t, e, wf, keys...) {
		if _, err := result(t, r); err != nil {
			t.Fatalf("run %s: %v", r.ID, err)
		}
	}
	for _, k := range []string{"a", "b"} {
		if got := p.max(k); got > 2 || got < 1 {
			t.Errorf("key %s: %d calls at once, limit 2", k, got)
		}
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.attempts`); n != 12 {
		t.Errorf("attempts = %d, want 12 (a denied step makes none)", n)
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.throttles WHERE ended_at IS NULL`); n != 0 {
		t.Errorf("%d throttles left open", n)
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.throttles WHERE cause = 'concurrency'`); n == 0 {
		t.Error("no step was throttled: the test shows nothing")
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.attempt_timeline WHERE throttled_by = 'concurrency' AND throttled_for > interval '0'`); n == 0 {
		t.Error("attempt_timeline names no throttled attempt")
	}
	if got := fscalar[string](e, `SELECT coalesce(sum(in_use), 0) || ' ' || (SELECT count(*) FROM {schema}.attempts WHERE hold_key IS NOT NULL)
		FROM {schema}.flow_keys`); got != "0 0" {
		t.Errorf("count and holders after every run completed: %s, want 0 0", got)
	}
}

func TestFlow_RateLimitSpacesStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ds := flow.New("rated-api", flow.Rate(10, time.Second, 2))
	act := activities.New("call-rated", func(ctx context.Context, x keyed) (int, error) { return x.N, nil }).Calls(ds, nil)
	wf := sdk.NewWorkflow("rated", func(ctx context.Context, x keyed) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(e.config(), wf)
	began := time.Now()
	for _, r := range startKeyed(t, e, wf, "", "", "", "", "", "", "", "") {
		if _, err := result(t, r); err != nil {
			t.Fatal(err)
		}
	}
	// 8 starts at 10/s with a burst of 2: the 8th no sooner than 0.6 s.
	if took := time.Since(began); took < 550*time.Millisecond {
		t.Errorf("8 starts took %v: faster than 10/s with a burst of 2", took)
	}
	span := fscalar[float64](e, `SELECT extract(epoch FROM max(started_at) - min(started_at)) FROM {schema}.attempts`)
	if span < 0.59 {
		t.Errorf("the ledger's starts span %.3fs, want at least 0.6s", span)
	}
}

func TestFlow_BreakerOpensProbesAndCloses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ds := flow.New("flaky-api", flow.Breaker(flow.BreakerPolicy{ErrorRatio: 0.5, MinCalls: 3, Window: 10 * time.Second, OpenFor: 300 * time.Millisecond}))
	var down atomic.Bool
	down.Store(true)
	var calls atomic.Int32
	act := activities.New("call-flaky", func(ctx context.Context, x keyed) (int, error) {
		calls.Add(1)
		if down.Load() {
			return 0, errors.New("503")
		}
		return x.N, nil
	}, policy.MaxAttempts(50), policy.Constant(20*time.Millisecond)).Calls(ds, nil)
	wf := sdk.NewWorkflow("breaker", func(ctx context.Context, x keyed) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(e.config(), wf)
	runs := startKeyed(t, e, wf, "", "", "", "", "")
	eventually(t, "the breaker opens", func() bool {
		return fscalar[string](e, `SELECT coalesce((SELECT breaker FROM {schema}.downstream_status WHERE name = 'flaky-api'), 'closed')`) != "closed"
	})
	time.Sleep(time.Second)
	down.Store(false)
	for _, r := range runs {
		if _, err := result(t, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := fscalar[string](e, `SELECT breaker FROM {schema}.downstream_status WHERE name = 'flaky-api'`); got != "closed" {
		t.Errorf("breaker %s after recovery, want closed", got)
	}
	hist := fscalar[string](e, `SELECT string_agg(from_state || '>' || to_state, ' ' ORDER BY id) FROM {schema}.breaker_history`)
	if hist == "" {
		t.Fatal("no breaker history")
	}
	t.Logf("breaker history: %s; %d calls", hist, calls.Load())
	// While open, probes are one per open interval: far fewer calls than
	// the runs' retries at 20 ms would make.
	if n := calls.Load(); n > 40 {
		t.Errorf("%d calls: the breaker did not hold back retries", n)
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.throttles WHERE cause = 'breaker'`); n == 0 {
		t.Error("no step waited on the breaker")
	}
}

func TestFlow_LimitChangedInSQLIsAuditedAndKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ds := flow.New("tunable", flow.Concurrency(5))
	act := activities.New("call-tunable", func(ctx context.Context, x keyed) (int, error) { return x.N, nil }).Calls(ds, nil)
	wf := sdk.NewWorkflow("tunable", func(ctx context.Context, x keyed) (int, error) { return sdk.Execute(ctx, act, x) })
	w := e.worker(e.config(), wf)
	if _, err := result(t, startKeyed(t, e, wf, "")[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`SELECT %s.set_downstream('tunable', '{"concurrency": 1}', 'INC-7')`, e.schema)); err != nil {
		t.Fatal(err)
	}
	if got := fscalar[int32](e, `SELECT concurrency FROM {schema}.downstreams WHERE name = 'tunable'`); got != 1 {
		t.Fatalf("concurrency %d after set_downstream, want 1", got)
	}
	audit := fscalar[string](e, `SELECT string_agg(filter->>'by' || ':' || coalesce(filter->'after'->>'concurrency', '-') || ':' || coalesce(note, ''), ' ' ORDER BY id)
		FROM {schema}.audit_log WHERE action = 'limits'`)
	if want := "declaration by " + w.Label() + ":5: person:1:INC-7"; audit != want {
		t.Errorf("audit = %q, want %q", audit, want)
	}
	// A second worker's declaration no longer overrides the person's change.
	e.worker(e.config(), wf)
	if _, err := result(t, startKeyed(t, e, wf, "")[0]); err != nil {
		t.Fatal(err)
	}
	if got := fscalar[int32](e, `SELECT concurrency FROM {schema}.downstreams WHERE name = 'tunable'`); got != 1 {
		t.Errorf("concurrency %d after a worker declared 5 again, want the person's 1", got)
	}
}

// blockFirst is an activity calling ds whose call for input Key "block"
// blocks on g; others return at once.
func blockFirst(g *gate, ds *flow.Downstream, started *atomic.Int32) *activities.Activity[keyed, int] {
	return activities.New("call-blocking", func(ctx context.Context, x keyed) (int, error) {
		started.Add(1)
		if x.Key == "block" {
			g.wait()
		}
		return x.N, nil
	}, policy.MaxAttempts(1)).Calls(ds, nil)
}

// oneAtATime starts a worker whose activity calls a downstream of
// concurrency 1, a first run whose call holds the slot (blocked on g), and
// a second run, which the limit will make wait.
func oneAtATime(t *testing.T) (e *env, g *gate, started *atomic.Int32, first, second *sdk.Run[int]) {
	t.Helper()
	e = newEnv(t)
	g = newGate(e)
	started = new(atomic.Int32)
	act := blockFirst(g, flow.New("one-at-a-time", flow.Concurrency(1)), started)
	wf := sdk.NewWorkflow("one-at-a-time", func(ctx context.Context, x keyed) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(e.config(), wf)
	first = startKeyed(t, e, wf, "block")[0]
	eventually(t, "the first call holds the slot", func() bool { return started.Load() == 1 })
	second = startKeyed(t, e, wf, "")[0]
	return e, g, started, first, second
}

func TestFlow_CapacityOfALostLeaseComesBack(t *testing.T) {
	t.Parallel()
	e, g, _, first, second := oneAtATime(t)
	eventually(t, "the second run waits on the limit", func() bool {
		return fscalar[int64](e, `SELECT count(*) FROM {schema}.flow_waiters WHERE run_id = $1`, second.ID) == 1
	})
	// The first run's lease moves on (as when its worker dies and another
	// takes it): its slot is held by a stale epoch, which holds nothing.
	if _, err := e.pool.Exec(e.ctx, strings.ReplaceAll(`UPDATE {schema}.runs SET epoch = epoch + 1 WHERE id = $1`, "{schema}", e.schema), first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, second); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.attempts WHERE run_id = $1`, second.ID); n != 1 {
		t.Errorf("second run made %d attempts, want 1", n)
	}
	g.release()
}

func TestFlow_CancelEndsARunWaitingOnALimit(t *testing.T) {
	t.Parallel()
	e, g, started, first, second := oneAtATime(t)
	eventually(t, "the second run waits on the limit", func() bool {
		return fscalar[string](e, `SELECT coalesce(waiting_for, '') FROM {schema}.runs WHERE id = $1`, second.ID) == "limit:one-at-a-time"
	})
	if err := e.client.Cancel(e.ctx, second.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, second); !errors.Is(err, sdk.ErrCancelled) {
		t.Fatalf("second run: %v, want cancelled", err)
	}
	if got := fscalar[bool](e, `SELECT waiting FROM {schema}.step_throttling WHERE run_id = $1`, second.ID); got {
		t.Error("a cancelled run's step is still shown waiting")
	}
	g.release()
	if _, err := result(t, first); err != nil {
		t.Fatal(err)
	}
	if n := started.Load(); n != 1 {
		t.Errorf("%d calls, want 1: the cancelled run never called", n)
	}
}

func TestFlow_RetryBudgetHoldsRetriesBackWithoutChargingThem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ds := flow.New("budgeted", flow.WithRetryBudget(0, 5))
	var calls sync.Map // run input -> calls
	act := activities.New("call-budgeted", func(ctx context.Context, x keyed) (int, error) {
		n, _ := calls.LoadOrStore(x.N, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) <= 3 {
			return 0, errors.New("503")
		}
		return x.N, nil
	}, policy.MaxAttempts(4), policy.Constant(10*time.Millisecond), policy.Jitter(policy.NoJitter)).Calls(ds, nil)
	wf := sdk.NewWorkflow("budgeted", func(ctx context.Context, x keyed) (int, error) { return sdk.Execute(ctx, act, x) })
	e.worker(e.config(), wf)
	began := time.Now()
	for _, r := range startKeyed(t, e, wf, "", "", "", "", "", "") {
		if _, err := result(t, r); err != nil {
			t.Fatalf("run %s: %v (a retry held back by the budget must not be charged)", r.ID, err)
		}
	}
	// 18 retries at 5 a second, with a balance of 5: at least 2.6 s.
	if took := time.Since(began); took < 2500*time.Millisecond {
		t.Errorf("18 retries took %v: faster than a budget of 5/s allows", took)
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.attempts`); n != 24 {
		t.Errorf("attempts = %d, want 24", n)
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.throttles WHERE cause = 'retry-budget'`); n == 0 {
		t.Error("no retry waited on the budget")
	}
}

// keyedWorkflow is a workflow of one step, limited to one run in progress
// per input Key with policy pol; the step's call for N 0 waits for
// release (or its context).
func keyedWorkflow(name string, pol sdk.ConcurrencyPolicy, release chan struct{}, p *peak) *sdk.Workflow[keyed, int] {
	act := activities.New(name+"-step", func(ctx context.Context, x keyed) (int, error) {
		p.enter(x.Key)
		defer p.leave(x.Key)
		if x.N == 0 {
			select {
			case <-release:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return x.N, nil
	}, policy.MaxAttempts(1))
	return sdk.NewWorkflow(name, func(ctx context.Context, x keyed) (int, error) {
		return sdk.Execute(ctx, act, x)
	}, sdk.WithConcurrency(sdk.Concurrency[keyed]{Key: func(x keyed) string { return x.Key }, Limit: 1, Policy: pol}))
}

func startOne(t *testing.T, e *env, wf *sdk.Workflow[keyed, int], x keyed) *sdk.Run[int] {
	t.Helper()
	r, err := sdk.Start(e.ctx, e.client, wf, x)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestFlow_WorkflowConcurrencyKeyQueuesRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	p := newPeak()
	wf := keyedWorkflow("sync-account", sdk.ConcurrencyQueue, release, p)
	e.worker(e.config(), wf)
	first := startOne(t, e, wf, keyed{Key: "acct-1", N: 0})
	eventually(t, "the first run is in progress", func() bool { return p.max("acct-1") == 1 })
	var rest []*sdk.Run[int]
	for i := 1; i <= 3; i++ {
		rest = append(rest, startOne(t, e, wf, keyed{Key: "acct-1", N: i}))
	}
	other := startOne(t, e, wf, keyed{Key: "acct-2", N: 9})
	if _, err := result(t, other); err != nil {
		t.Fatalf("a run of another key waits for acct-1's: %v", err)
	}
	eventually(t, "the later runs of acct-1 wait", func() bool {
		return fscalar[int64](e, `SELECT count(*) FROM {schema}.runs WHERE waiting_for = 'limit:workflow:sync-account'`) == 3
	})
	close(release)
	for _, r := range append(rest, first) {
		if _, err := result(t, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.max("acct-1"); got != 1 {
		t.Errorf("%d runs of one key in progress at once, limit 1", got)
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.attempts`); n != 5 {
		t.Errorf("attempts = %d, want 5: waiting is no attempt", n)
	}
}

func TestFlow_WorkflowConcurrencyKeyCancelNewest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	p := newPeak()
	wf := keyedWorkflow("charge-once", sdk.CancelNewest, release, p)
	e.worker(e.config(), wf)
	first := startOne(t, e, wf, keyed{Key: "order-1", N: 0})
	eventually(t, "the first run is in progress", func() bool { return p.max("order-1") == 1 })
	second := startOne(t, e, wf, keyed{Key: "order-1", N: 1})
	if _, err := result(t, second); !errors.Is(err, sdk.ErrCancelled) {
		t.Fatalf("the newest run: %v, want cancelled", err)
	}
	close(release)
	if _, err := result(t, first); err != nil {
		t.Fatalf("the run in progress: %v", err)
	}
}

func TestFlow_WorkflowConcurrencyKeyCancelInProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	defer close(release)
	p := newPeak()
	wf := keyedWorkflow("latest-wins", sdk.CancelInProgress, release, p)
	e.worker(e.config(), wf)
	first := startOne(t, e, wf, keyed{Key: "doc-1", N: 0})
	eventually(t, "the first run is in progress", func() bool { return p.max("doc-1") == 1 })
	second := startOne(t, e, wf, keyed{Key: "doc-1", N: 1})
	if _, err := result(t, first); !errors.Is(err, sdk.ErrCancelled) {
		t.Fatalf("the run in progress: %v, want cancelled", err)
	}
	if got, err := result(t, second); err != nil || got != 1 {
		t.Fatalf("the newest run: %d, %v", got, err)
	}
	if got := p.max("doc-1"); got != 1 {
		t.Errorf("%d runs of one key in progress at once, limit 1", got)
	}
}

// Two downstreams of one name with different limits: the first declared
// applies, and the worker says so once, not at every step that declares
// the other.
func TestFlow_OtherLimitsUnderOneNameAreLoggedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := flow.New("one-api", flow.Concurrency(5))
	other := flow.New("one-api", flow.Concurrency(7))
	a := activities.New("call-a", func(ctx context.Context, n int) (int, error) { return n, nil }).Calls(first, nil)
	b := activities.New("call-b", func(ctx context.Context, n int) (int, error) { return n, nil }).Calls(other, nil)
	wf := sdk.NewWorkflow("two-declarations", func(ctx context.Context, n int) (int, error) {
		for i := range 3 {
			for _, act := range []*activities.Activity[int, int]{a, b} {
				if _, err := sdk.Execute(ctx, act, n+i); err != nil {
					return 0, err
				}
			}
		}
		return n, nil
	})
	var log logBuffer
	cfg := e.config()
	cfg.Logger = log.logger()
	e.worker(cfg, wf)
	for i := range 4 {
		r, err := sdk.Start(e.ctx, e.client, wf, i)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := result(t, r); err != nil {
			t.Fatalf("run %s: %v", r.ID, err)
		}
	}
	const warning = "declare different limits"
	if n := strings.Count(log.String(), warning); n != 1 {
		t.Fatalf("the warning was logged %d times in 12 steps of each declaration, want once:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), `applied="concurrency 5`) || !strings.Contains(log.String(), `ignored="concurrency 7`) {
		t.Errorf("the warning names neither the limits applied nor those ignored:\n%s", log.String())
	}
	if got := fscalar[string](e, `SELECT concurrency::text FROM {schema}.downstreams WHERE name = 'one-api'`); got != "5" {
		t.Errorf("the downstream's concurrency is %s, want the first declared, 5", got)
	}
}
