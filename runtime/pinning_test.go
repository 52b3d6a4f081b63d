package runtime_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// The proof of pinning (issue: safe deploys): 200 runs of a pinned v1
// workflow parked in a one-hour sleep; v2 swaps the steps after it. A
// worker of build v2 alone claims none of the 200 (their sleep ends, and
// they wait), names their build in its log and in orphaned_runs, and runs
// 200 new runs meanwhile; tenure runs move (operator.MoveRuns) moves the
// old runs to v2, audited, and all 200 complete there, every activity
// invoked once per run.
func TestPinning_AV2WorkerClaimsNoneOf200V1RunsUntilTheyAreMoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls [4]atomic.Int32
	steps := make([]*activities.Activity[int, int], 4)
	for i := range steps {
		steps[i] = activities.New(string(rune('a'+i)), func(ctx context.Context, n int) (int, error) { calls[i].Add(1); return n + 1, nil })
	}
	a, b, c, d := steps[0], steps[1], steps[2], steps[3]
	version := func(after ...*activities.Activity[int, int]) *sdk.Workflow[int, int] {
		return sdk.NewWorkflow("pinned", func(ctx context.Context, n int) (int, error) {
			for _, act := range []*activities.Activity[int, int]{a, b} {
				var err error
				if n, err = sdk.Execute(ctx, act, n); err != nil {
					return 0, err
				}
			}
			if err := sdk.Sleep(ctx, time.Hour); err != nil {
				return 0, err
			}
			for _, act := range after {
				var err error
				if n, err = sdk.Execute(ctx, act, n); err != nil {
					return 0, err
				}
			}
			return n, nil
		}, sdk.WithPinning())
	}
	v1, v2 := version(c, d), version(d, c)
	const n = 200
	ids := func(runs []*sdk.Run[int]) []uuid.UUID {
		out := make([]uuid.UUID, len(runs))
		for i, r := range runs {
			out[i] = r.ID
		}
		return out
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
		// Parked: the sleep recorded and the run released (a wake before the
		// release would find it running, and leave it asleep for an hour).
		eventually(t, "the runs to park in their sleep", func() bool {
			return q[int](e, `SELECT count(*) FROM {schema}.runs WHERE id = ANY ($1) AND status = 'queued' AND waiting_for = 'sleep'`, ids(runs)) == n
		})
		return runs
	}
	wake := func(runs []*sdk.Run[int]) {
		t.Helper()
		e.exec(`UPDATE {schema}.steps SET due_at = now() WHERE run_id = ANY ($1) AND kind = 'sleep'`, ids(runs))
		e.exec(`UPDATE {schema}.runs SET run_after = now() WHERE id = ANY ($1) AND status = 'queued'`, ids(runs))
	}

	cfg1 := e.config()
	cfg1.Concurrency, cfg1.BuildID = 32, "v1"
	w1 := e.worker(cfg1, v1)
	old := start(v1)
	stop(t, w1, 5*time.Second)
	if got := q[int](e, `SELECT count(*) FROM {schema}.runs WHERE id = ANY ($1) AND pinned_to = 'v1'`, ids(old)); got != n {
		t.Fatalf("%d of %d v1 runs pinned to v1", got, n)
	}
	epochs := q[int64](e, `SELECT sum(epoch) FROM {schema}.runs WHERE id = ANY ($1)`, ids(old))

	// The v2 worker: the old runs' sleep ends, and it claims none of them;
	// it runs 200 new ones meanwhile.
	logs := &logBuffer{}
	cfg2 := e.config()
	cfg2.Concurrency, cfg2.BuildID, cfg2.Logger = 32, "v2", logs.logger()
	e.worker(cfg2, v2)
	wake(old)
	fresh := start(v2)
	wake(fresh)
	for i, r := range fresh {
		if out, err := result(t, r); err != nil || out != i+4 {
			t.Fatalf("new run %s under v2: %d, %v", r.ID, out, err)
		}
	}
	if got := q[string](e, `SELECT count(*) FILTER (WHERE status = 'queued' AND run_after <= now()) || ' ' || sum(epoch)
		FROM {schema}.runs WHERE id = ANY ($1)`, ids(old)); got != fmt.Sprintf("%d %d", n, epochs) {
		t.Fatalf("old runs due and their epochs' sum after v2 ran 200 runs: %s, want %d %d (none claimed)", got, n, epochs)
	}
	if got := q[int](e, `SELECT count(*) FROM {schema}.steps WHERE run_id = ANY ($1) AND build_id = 'v2'`, ids(old)); got != 0 {
		t.Fatalf("v2 wrote %d steps of the old runs", got)
	}
	if got := calls[2].Load() + calls[3].Load(); got != 2*n {
		t.Fatalf("c and d invoked %d times, want %d (the new runs' alone)", got, 2*n)
	}
	// Nobody is stranded silently: the worker's log and the orphaned runs
	// name the build.
	if l := logs.String(); !strings.Contains(l, "pinned to a build no live worker runs") || !strings.Contains(l, "build=v1") ||
		!strings.Contains(l, fmt.Sprintf("runs=%d", n)) {
		t.Fatalf("the v2 worker's log does not name the stranded build v1:\n%s", l)
	}
	orphans, err := e.op.Orphans(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// docs/deploying.md's count of what each build has to finish, as written.
	doc, err := os.ReadFile("../docs/deploying.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := sqlBlock.FindAllStringSubmatch(string(doc), -1)
	rows, err := e.pool.Query(e.ctx, strings.ReplaceAll(blocks[3][1], "tenure.", e.schema+"."))
	if err != nil {
		t.Fatalf("docs/deploying.md's query of pinned runs: %v", err)
	}
	left := map[string]int{}
	for rows.Next() {
		var build, workflow, status string
		var count int
		if err := rows.Scan(&build, &workflow, &status, &count); err != nil {
			t.Fatal(err)
		}
		left[build+" "+workflow+" "+status] = count
	}
	if rows.Close(); rows.Err() != nil || left["v1 pinned queued"] != n || len(left) != 1 {
		t.Fatalf("docs/deploying.md's query of pinned runs: %v, %v; want v1's %d queued runs alone", left, rows.Err(), n)
	}
	if len(orphans) != 1 || orphans[0].Build != "v1" || orphans[0].Runs != n {
		t.Fatalf("orphaned runs %+v, want the %d runs pinned to v1", orphans, n)
	}

	// runs move --dry-run, then the move: all 200 resume under v2.
	filter := operator.MoveFilter{From: "v1", To: "v2"}
	want := []record.MovedRuns{{Workflow: "pinned", Queue: "default", Status: record.RunQueued, Runs: n}}
	dry, err := e.op.MoveRuns(e.ctx, filter, operator.MoveOptions{DryRun: true})
	if err != nil || len(dry) != 1 || dry[0] != want[0] {
		t.Fatalf("dry run: %+v, %v; want %+v", dry, err, want)
	}
	if got := q[int](e, `SELECT count(*) FROM {schema}.runs WHERE id = ANY ($1) AND pinned_to = 'v1'`, ids(old)); got != n {
		t.Fatalf("the dry run moved %d runs", n-got)
	}
	moved, err := e.op.MoveRuns(e.ctx, filter, operator.MoveOptions{Note: "v1 retired", BatchSize: 64})
	if err != nil || len(moved) != 1 || moved[0] != want[0] {
		t.Fatalf("move: %+v, %v; want %+v", moved, err, want)
	}
	for i, r := range old {
		if out, err := result(t, r); err != nil || out != i+4 {
			t.Fatalf("old run %s moved to v2: %d, %v", r.ID, out, err)
		}
	}
	for i := range calls {
		if got := calls[i].Load(); got != 2*n {
			t.Fatalf("activity %c invoked %d times for %d runs, want once each", 'a'+i, got, 2*n)
		}
	}
	if got := q[string](e, `SELECT count(*) || ' ' || sum(runs) || ' ' || string_agg(DISTINCT note || ' ' || (filter->>'from_build') || ' ' || (filter->>'to_build'), ',')
		FROM {schema}.audit_log WHERE action = 'move'`); got != fmt.Sprintf("4 %d v1 retired v1 v2", n) {
		t.Fatalf("the move's audit rows (batches of 64): %q", got)
	}
	if orphans, err := e.op.Orphans(e.ctx); err != nil || len(orphans) != 0 {
		t.Fatalf("orphaned runs after the move: %+v, %v", orphans, err)
	}
}
