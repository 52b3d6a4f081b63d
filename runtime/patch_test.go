package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/sdk"
)

// A patch lets the runs that passed its point before it existed take the
// old branch and every other run the new one; patch_status counts the open
// runs that may still take the old branch. DeprecatePatch, then no call at
// all, replay the runs that recorded the patch.
func TestPatch_OldRunsTakeTheOldBranchNewRunsTheNew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var version atomic.Int32
	var olds, news atomic.Int32
	first := activities.New("first", func(ctx context.Context, n int) (int, error) { return n, nil })
	oldStep := activities.New("old", func(ctx context.Context, n int) (int, error) { olds.Add(1); return n + 1, nil })
	newStep := activities.New("new", func(ctx context.Context, n int) (int, error) { news.Add(1); return n + 100, nil })
	wf := sdk.NewWorkflow("patched", func(ctx context.Context, n int) (int, error) {
		n, err := sdk.Execute(ctx, first, n)
		if err != nil {
			return 0, err
		}
		step := oldStep
		switch version.Load() {
		case 1: // the deploy that patched it
			if sdk.Patched(ctx, "new-step") {
				step = newStep
			}
		case 2: // once no run could take the old branch
			sdk.DeprecatePatch(ctx, "new-step")
			step = newStep
		case 3: // the call removed
			step = newStep
		}
		if n, err = sdk.Execute(ctx, step, n); err != nil {
			return 0, err
		}
		if _, err := sdk.Receive[string](ctx, "go", 0); err != nil {
			return 0, err
		}
		return n, nil
	})
	e.worker(e.config(), wf)
	start := func() *sdk.Run[int] { t.Helper(); return startWaiting(t, e, wf, 1) }
	finish := func(r *sdk.Run[int], want int) {
		t.Helper()
		if err := e.client.Send(e.ctx, r.ID, "go", "now"); err != nil {
			t.Fatal(err)
		}
		if out, err := result(t, r); err != nil || out != want {
			t.Fatalf("run %s: %d, %v; want %d", r.ID, out, err, want)
		}
	}
	status := func() string {
		return q[string](e, `SELECT coalesce(string_agg(patch || ' ' || open_with || ' ' || open_without, '; '), 'none') FROM {schema}.patch_status WHERE workflow = 'patched'`)
	}
	kinds := func(id uuid.UUID) string {
		return q[string](e, `SELECT string_agg(kind || ':' || activity, ' ' ORDER BY step) FROM {schema}.steps WHERE run_id = $1`, id)
	}

	old := start() // v0: passed the point with the old step
	version.Store(1)
	patched := start()
	if got := status(); got != "new-step 1 1" {
		t.Fatalf("patch_status after the deploy: %q, want new-step 1 1 (one run with it, one old without)", got)
	}
	if got, want := kinds(patched.ID), "activity:first patch:new-step activity:new signal:go"; got != want {
		t.Fatalf("the new run's steps: %q, want %q", got, want)
	}
	// docs/deploying.md's query, as written, reads the same.
	doc, err := os.ReadFile("../docs/deploying.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := sqlBlock.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) != 4 {
		t.Fatalf("%d sql blocks in docs/deploying.md, want 4", len(blocks))
	}
	// The builds that wrote the open runs' steps, for the page's workflow
	// and for this one.
	for _, wf := range []string{"checkout", "patched"} {
		q := strings.ReplaceAll(strings.ReplaceAll(blocks[1][1], "tenure.", e.schema+"."), "'checkout'", "'"+wf+"'")
		rows, err := e.pool.Query(e.ctx, q)
		if err != nil {
			t.Fatalf("docs/deploying.md's query of builds: %v", err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if rows.Close(); rows.Err() != nil || (wf == "patched") != (n == 1) {
			t.Fatalf("docs/deploying.md's query of builds for %s: %d rows, %v", wf, n, rows.Err())
		}
	}
	var workflow, patch string
	var firstAt, oldest time.Time
	var with, without int
	if err := e.pool.QueryRow(e.ctx, strings.ReplaceAll(blocks[0][1], "tenure.", e.schema+".")).Scan(&workflow, &patch, &firstAt, &with, &without, &oldest); err != nil ||
		workflow != "patched" || patch != "new-step" || with != 1 || without != 1 || !oldest.Before(firstAt) {
		t.Fatalf("docs/deploying.md's query: %s %s %v %d %d %v, %v", workflow, patch, firstAt, with, without, oldest, err)
	}
	finish(old, 2)       // replayed under v1: the old branch
	finish(patched, 101) // the new branch
	if olds.Load() != 1 || news.Load() != 1 {
		t.Fatalf("old step invoked %d times, new %d; want 1 and 1", olds.Load(), news.Load())
	}
	if got := status(); got != "new-step 0 0" {
		t.Fatalf("patch_status once both ended: %q, want new-step 0 0", got)
	}

	// Deprecated: a run that recorded the patch replays past it; a new run
	// records none. Then the call removed: its record is passed over.
	withPatch, withPatch2 := start(), start()
	version.Store(2)
	deprecated := start()
	if got, want := kinds(deprecated.ID), "activity:first activity:new signal:go"; got != want {
		t.Fatalf("a run after DeprecatePatch: steps %q, want %q", got, want)
	}
	finish(deprecated, 101)
	finish(withPatch, 101) // replayed past its record by DeprecatePatch
	version.Store(3)
	finish(withPatch2, 101) // its record passed over
	if olds.Load() != 1 {
		t.Fatalf("old step invoked %d times, want once", olds.Load())
	}
}

// Patched outside a workflow, or with an empty ID, is a programming error.
func TestPatch_OutsideAWorkflowPanics(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"x", ""} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Patched(%q) outside a workflow did not panic", id)
				}
			}()
			sdk.Patched(context.Background(), id)
		}()
	}
}

// A worker's build is recorded on its registry row, on the runs it claims
// first (another build's later claim keeps it) and on the steps it writes.
func TestBuildID_RecordedOnTheWorkerTheRunsFirstClaimAndEachStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := activities.New("first", func(ctx context.Context, n int) (int, error) { return n, nil })
	wf := sdk.NewWorkflow("built", func(ctx context.Context, n int) (int, error) {
		if _, err := sdk.Execute(ctx, first, n); err != nil {
			return 0, err
		}
		if _, err := sdk.Receive[string](ctx, "go", 0); err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, first, n+1)
	})
	cfg := e.config()
	cfg.BuildID = "v1.0.0+abc"
	w1 := e.worker(cfg, wf)
	r := startWaiting(t, e, wf, 1)
	// docs/deploying.md's query of the open runs by build, as written.
	doc, err := os.ReadFile("../docs/deploying.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := sqlBlock.FindAllStringSubmatch(string(doc), -1)
	var build, workflow string
	var open int
	if err := e.pool.QueryRow(e.ctx, strings.ReplaceAll(blocks[2][1], "tenure.", e.schema+".")).Scan(&build, &workflow, &open); err != nil ||
		build != "v1.0.0+abc" || workflow != "built" || open != 1 {
		t.Fatalf("docs/deploying.md's query of open runs by build: %s %s %d, %v", build, workflow, open, err)
	}
	stop(t, w1, 5*time.Second)
	cfg.BuildID = "v1.0.1+def"
	e.worker(cfg, wf)
	if err := e.client.Send(e.ctx, r.ID, "go", "now"); err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, r); err != nil || out != 2 {
		t.Fatalf("result %d, %v", out, err)
	}
	if got := q[string](e, `SELECT string_agg(build_id, ' ' ORDER BY started_at) FROM {schema}.workers`); got != "v1.0.0+abc v1.0.1+def" {
		t.Errorf("workers' builds: %q", got)
	}
	if got := q[string](e, `SELECT build_id FROM {schema}.runs WHERE id = $1`, r.ID); got != "v1.0.0+abc" {
		t.Errorf("the run's build: %q, want the first claim's", got)
	}
	if got := q[string](e, `SELECT string_agg(build_id, ' ' ORDER BY step) FROM {schema}.steps WHERE run_id = $1`, r.ID); got != "v1.0.0+abc v1.0.0+abc v1.0.1+def" {
		t.Errorf("the steps' builds: %q, want each step's writer's", got)
	}
}

// A patch of a patched block (if Patched("b") ... else if Patched("a")
// ...): a run that took a's branch takes it again, one that passed the
// point before either takes the oldest, a new run takes b's.
func TestPatch_APatchOfAPatchedBlockKeepsEachRunsBranch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var version atomic.Int32
	calls := map[string]*atomic.Int32{"old": {}, "a": {}, "b": {}}
	step := func(name string, add int) *activities.Activity[int, int] {
		return activities.New(name, func(ctx context.Context, n int) (int, error) { calls[name].Add(1); return n + add, nil })
	}
	old, a, b := step("old", 1), step("a", 10), step("b", 100)
	wf := sdk.NewWorkflow("repatched", func(ctx context.Context, n int) (int, error) {
		act := old
		switch {
		case version.Load() >= 2 && sdk.Patched(ctx, "b"):
			act = b
		case version.Load() >= 1 && sdk.Patched(ctx, "a"):
			act = a
		}
		n, err := sdk.Execute(ctx, act, n)
		if err != nil {
			return 0, err
		}
		_, err = sdk.Receive[string](ctx, "go", 0)
		return n, err
	})
	e.worker(e.config(), wf)
	start := func() *sdk.Run[int] { t.Helper(); return startWaiting(t, e, wf, 0) }
	v0 := start()
	version.Store(1)
	v1 := start()
	version.Store(2)
	v2 := start()
	for _, c := range []struct {
		run  *sdk.Run[int]
		want int
	}{{v0, 1}, {v1, 10}, {v2, 100}} {
		if err := e.client.Send(e.ctx, c.run.ID, "go", "now"); err != nil {
			t.Fatal(err)
		}
		if out, err := result(t, c.run); err != nil || out != c.want {
			t.Fatalf("run %s: %d, %v; want %d", c.run.ID, out, err, c.want)
		}
	}
	for name, n := range calls {
		if n.Load() != 1 {
			t.Errorf("step %q invoked %d times, want once", name, n.Load())
		}
	}
}

// The live proof: runs of a v1 parked in a 1-hour sleep after four
// steps. Woken under a v2 that swaps steps 3 and 4, all 200 fail
// nondeterminism, no activity invoked twice. Under a v3 that patches the
// swap instead, 200 other old runs take the old branch, 200 new runs the
// new one, patch_status counts the old ones until they end, and a requeue
// of the 200 failed runs completes them, again with no activity invoked
// twice.
func TestPatch_TwoHundredRunsInFlightThroughADeploy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls [4]atomic.Int32
	steps := make([]*activities.Activity[int, int], 4)
	for i := range steps {
		steps[i] = activities.New(string(rune('a'+i)), func(ctx context.Context, n int) (int, error) { calls[i].Add(1); return n + 1, nil })
	}
	a, b, c, d := steps[0], steps[1], steps[2], steps[3]
	version := func(order func(ctx context.Context) []*activities.Activity[int, int]) *sdk.Workflow[int, int] {
		return sdk.NewWorkflow("deployed", func(ctx context.Context, n int) (int, error) {
			for _, act := range order(ctx) {
				var err error
				if n, err = sdk.Execute(ctx, act, n); err != nil {
					return 0, err
				}
			}
			return n, sdk.Sleep(ctx, time.Hour)
		})
	}
	v1 := version(func(context.Context) []*activities.Activity[int, int] {
		return []*activities.Activity[int, int]{a, b, c, d}
	})
	v2 := version(func(context.Context) []*activities.Activity[int, int] {
		return []*activities.Activity[int, int]{a, b, d, c}
	})
	v3 := version(func(ctx context.Context) []*activities.Activity[int, int] {
		first := []*activities.Activity[int, int]{a, b}
		if sdk.Patched(ctx, "d-before-c") {
			return append(first, d, c)
		}
		return append(first, c, d)
	})
	const n = 200
	cfg := e.config()
	cfg.Concurrency = 32
	parked := func(runs []*sdk.Run[int]) {
		t.Helper()
		ids := make([]uuid.UUID, len(runs))
		for i, r := range runs {
			ids[i] = r.ID
		}
		eventually(t, "the runs to park in their sleep", func() bool {
			return q[int](e, `SELECT count(*) FROM {schema}.steps WHERE run_id = ANY ($1) AND kind = 'sleep'`, ids) == len(runs)
		})
	}
	start := func(wf *sdk.Workflow[int, int]) []*sdk.Run[int] {
		t.Helper()
		var runs []*sdk.Run[int]
		for i := range n {
			r, err := sdk.Start(e.ctx, e.client, wf, i)
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, r)
		}
		parked(runs)
		return runs
	}
	wake := func(runs []*sdk.Run[int]) {
		t.Helper()
		ids := make([]uuid.UUID, len(runs))
		for i, r := range runs {
			ids[i] = r.ID
		}
		e.exec(`UPDATE {schema}.steps SET due_at = now() WHERE run_id = ANY ($1) AND kind = 'sleep'`, ids)
		e.exec(`UPDATE {schema}.runs SET run_after = now() WHERE id = ANY ($1) AND status = 'queued'`, ids)
	}
	w1 := e.worker(cfg, v1)
	old, oldToo := start(v1), start(v1)
	stop(t, w1, 5*time.Second)
	w2 := e.worker(cfg, v2)
	wake(old)
	for _, r := range old {
		var re *sdk.RunError
		if _, err := result(t, r); !errors.As(err, &re) || re.Reason != sdk.ReasonNondeterminism || re.Step != 3 {
			t.Fatalf("run %s under the swapped v2: %v, want nondeterminism at step 3", r.ID, err)
		}
	}
	for i := range calls {
		if got := calls[i].Load(); got != 2*n {
			t.Fatalf("activity %c invoked %d times for %d runs, want once each", 'a'+i, got, 2*n)
		}
	}
	stop(t, w2, 5*time.Second)

	e.worker(cfg, v3)
	fresh := start(v3)
	status := func() string {
		return q[string](e, `SELECT open_with || ' ' || open_without FROM {schema}.patch_status WHERE workflow = 'deployed'`)
	}
	if got := status(); got != fmt.Sprintf("%d %d", n, n) {
		t.Fatalf("patch_status with %d new runs and %d old ones open (the %d failed ones not counted): %q", n, n, n, got)
	}
	wake(oldToo)
	for i, r := range oldToo {
		if out, err := result(t, r); err != nil || out != i+4 {
			t.Fatalf("old run %s under the patched v3: %d, %v", r.ID, out, err)
		}
	}
	for _, r := range old {
		if err := e.op.Requeue(e.ctx, r.ID, "deployed the patch"); err != nil {
			t.Fatal(err)
		}
	}
	parked(old)
	wake(append(old, fresh...))
	for i, r := range append(old, fresh...) {
		if out, err := result(t, r); err != nil || out != i%n+4 {
			t.Fatalf("run %s under the patched v3: %d, %v", r.ID, out, err)
		}
	}
	if got := status(); got != "0 0" {
		t.Fatalf("patch_status once every run ended: %q, want 0 0", got)
	}
	for i := range calls {
		if got := calls[i].Load(); got != 3*n {
			t.Fatalf("activity %c invoked %d times for %d runs, want once each", 'a'+i, got, 3*n)
		}
	}
	// The new runs took the new branch (the patch first, where v3 asks,
	// then a, b, d, c), the old ones the old (a, b, c, d).
	if got := q[string](e, `SELECT count(*) FILTER (WHERE kind = 'patch' AND step = 1) || ' ' ||
		count(*) FILTER (WHERE activity = 'c' AND step = 5) || ' ' || count(*) FILTER (WHERE activity = 'c' AND step = 3) FROM {schema}.steps`); got != fmt.Sprintf("%d %d %d", n, n, 2*n) {
		t.Fatalf("patches at step 1, c at step 5, c at step 3: %s; want %d %d %d", got, n, n, 2*n)
	}
}

// startWaiting starts a run of wf and waits until it waits for a signal.
func startWaiting[In any, Out any](t *testing.T, e *env, wf *sdk.Workflow[In, Out], in In) *sdk.Run[Out] {
	t.Helper()
	r, err := sdk.Start(e.ctx, e.client, wf, in)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the run to wait for its signal", func() bool {
		return q[int](e, `SELECT count(*) FROM {schema}.steps WHERE run_id = $1 AND kind = 'signal'`, r.ID) == 1
	})
	return r
}
