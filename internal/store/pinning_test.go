package store_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
)

// buildStore is a store on st's schema whose statements name build.
func buildStore(t testing.TB, st *store.Store, build string, pinned ...string) *store.Store {
	t.Helper()
	b, err := store.New(st.Pool(), store.WithSchema(st.Schema()), store.WithBuild(build))
	if err != nil {
		t.Fatal(err)
	}
	b.Pin(pinned)
	return b
}

// claimIDs claims up to 100 runs of workflows on queue default and returns
// their IDs, sorted.
func claimIDs(t *testing.T, st *store.Store, workflows ...string) []uuid.UUID {
	t.Helper()
	claimed, err := st.Claim(t.Context(), workflows, []string{"default"}, 100, "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for _, c := range claimed {
		ids = append(ids, c.ID)
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	return ids
}

// requeueAll puts every running run back in the queue, due now, as a
// release or the end of a sleep does.
func requeueAll(t *testing.T, st *store.Store) {
	t.Helper()
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`
		UPDATE {schema}.runs SET status = 'queued', run_after = now(), claimant = NULL, lease_expires_at = NULL
		WHERE status = 'running'`, st.Schema())); err != nil {
		t.Fatal(err)
	}
}

// expireAll makes every running run's lease expired, as a worker's death does.
func expireAll(t *testing.T, st *store.Store) {
	t.Helper()
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`
		UPDATE {schema}.runs SET lease_expires_at = now() - interval '1 second' WHERE status = 'running'`, st.Schema())); err != nil {
		t.Fatal(err)
	}
}

func insertQueued(t *testing.T, st *store.Store, workflow string, n int) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for range n {
		ids = append(ids, insertClaimRow(t, st, claimRow{workflow: workflow, queue: "default", status: "queued", age: 1}))
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	return ids
}

func TestClaim_APinnedRunIsClaimedOnlyByTheBuildThatFirstClaimedIt(t *testing.T) {
	st := newStore(t)
	v1 := buildStore(t, st, "v1", "pinned")
	v2 := buildStore(t, st, "v2", "pinned") // v2 pins the workflow too
	v3 := buildStore(t, st, "v3")           // v3 does not pin it
	pinned := insertQueued(t, st, "pinned", 3)
	free := insertQueued(t, st, "free", 2)

	// The first claim pins the pinned workflow's runs to v1, not the others.
	if got := claimIDs(t, v1, "pinned", "free"); len(got) != 5 {
		t.Fatalf("v1's first claim took %d runs, want 5", len(got))
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.runs WHERE pinned_to = 'v1'`); n != 3 {
		t.Fatalf("%d runs pinned to v1, want the 3 of the pinned workflow", n)
	}
	// Queued again (a sleep ended, a retry is due): v2 and v3 take the
	// unpinned runs only, v1 the pinned ones.
	requeueAll(t, st)
	if got := claimIDs(t, v2, "pinned", "free"); !slices.Equal(got, free) {
		t.Fatalf("v2 claimed %v, want the unpinned runs %v", got, free)
	}
	if got := claimIDs(t, v3, "pinned", "free"); len(got) != 0 {
		t.Fatalf("v3 claimed %v, want nothing", got)
	}
	if got := claimIDs(t, v1, "pinned", "free"); !slices.Equal(got, pinned) {
		t.Fatalf("v1 claimed %v, want its pinned runs %v", got, pinned)
	}
	// Their worker died: the expired leases too are v1's alone.
	expireAll(t, st)
	if got := claimIDs(t, v2, "pinned", "free"); !slices.Equal(got, free) {
		t.Fatalf("v2 reclaimed %v, want the unpinned runs %v", got, free)
	}
	if got := claimIDs(t, v3, "pinned"); len(got) != 0 {
		t.Fatalf("v3 reclaimed %v, want nothing", got)
	}
	if got := claimIDs(t, v1, "pinned"); !slices.Equal(got, pinned) {
		t.Fatalf("v1 reclaimed %v, want its pinned runs %v", got, pinned)
	}
	// A worker that does not pin the workflow (v3) still claims what is
	// pinned to its build.
	if _, err := st.MoveRuns(t.Context(), store.MoveFilter{From: "v1", To: "v3"}, store.MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	requeueAll(t, st)
	if got := claimIDs(t, v1, "pinned"); len(got) != 0 {
		t.Fatalf("v1 claimed %v after the move to v3, want nothing", got)
	}
	if got := claimIDs(t, v3, "pinned"); !slices.Equal(got, pinned) {
		t.Fatalf("v3 claimed %v, want the runs moved to it %v", got, pinned)
	}
	// A store without a build pins nothing.
	none := insertQueued(t, st, "pinned", 1)
	if got := claimIDs(t, st, "pinned"); !slices.Equal(got, none) {
		t.Fatalf("a store without a build claimed %v, want %v", got, none)
	}
	if p := scalar[string](t, st, `SELECT pinned_to FROM {schema}.runs WHERE id = $1`, none[0]); p != "" {
		t.Fatalf("a store without a build pinned a run to %q", p)
	}
}

func TestMoveRuns_MovesWhatIsStrandedAuditedAndNamesTheBuildWhileNobodyRunsIt(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	v1 := buildStore(t, st, "v1", "pinned")
	ids := insertQueued(t, st, "pinned", 4)
	insertQueued(t, st, "other", 1)
	if got := claimIDs(t, v1, "pinned"); len(got) != 4 {
		t.Fatalf("v1 claimed %d runs, want 4", len(got))
	}
	requeueAll(t, st)
	// One of them failed, one is running still.
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.runs SET status = 'failed', finished_at = now() WHERE id = $1`, ids[0])
	exec(t, st.Pool(), st.Schema(), `UPDATE {schema}.runs SET status = 'running', epoch = epoch + 1, lease_expires_at = now() + interval '1 minute'
		WHERE id = $1`, ids[1])

	// v2 is live, and a v1 worker that serves another workflow only: the v1
	// runs are orphans named by their build, and stranded for a v2 worker.
	beat(t, st, "v2", "pinned", "other")
	beat(t, st, "v1", "other")
	orphans, err := st.OrphanedRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(orphans) != 1 || orphans[0].Build != "v1" || orphans[0].Runs != 2 || orphans[0].Workflow != "pinned" {
		t.Fatalf("orphaned runs %+v, want the 2 queued runs of pinned on build v1", orphans)
	}
	stranded, err := st.Stranded(ctx, st.Pool(), []string{"pinned", "other"}, []string{"default"})
	if err != nil {
		t.Fatal(err)
	}
	if len(stranded) != 1 || stranded[0] != (store.Stranded{Workflow: "pinned", Queue: "default", Build: "v1", Runs: 3}) {
		t.Fatalf("stranded %+v, want the 3 queued or running runs of pinned on build v1", stranded)
	}

	for _, bad := range []store.MoveFilter{{From: "v1", To: "v1"}, {From: "", To: "v2"}, {From: "v1", To: "no spaces"}} {
		if _, err := st.MoveRuns(ctx, bad, store.MoveOptions{DryRun: true}); err == nil {
			t.Errorf("MoveRuns(%+v) = nil error", bad)
		}
	}
	if _, err := st.MoveRuns(ctx, store.MoveFilter{From: "v1", To: "v1"}, store.MoveOptions{}); !errors.Is(err, store.ErrSameBuild) {
		t.Errorf("a move to the same build: %v, want ErrSameBuild", err)
	}
	// The dry run counts by status and changes nothing.
	dry, err := st.MoveRuns(ctx, store.MoveFilter{From: "v1", To: "v2"}, store.MoveOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Moved{{Workflow: "pinned", Queue: "default", Status: "failed", Runs: 1},
		{Workflow: "pinned", Queue: "default", Status: "queued", Runs: 2}, {Workflow: "pinned", Queue: "default", Status: "running", Runs: 1}}
	if !slices.Equal(dry, want) {
		t.Fatalf("dry run %+v, want %+v", dry, want)
	}
	audits := scalar[int64](t, st, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'move'`)
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.runs WHERE pinned_to = 'v1'`); n != 4 || audits != 0 {
		t.Fatalf("after the dry run: %d runs on v1, %d audit rows; want 4 and 0", n, audits)
	}
	moved, err := st.MoveRuns(ctx, store.MoveFilter{From: "v1", To: "v2", Workflow: "pinned"}, store.MoveOptions{Note: "INC-7"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(moved, want) {
		t.Fatalf("moved %+v, want %+v", moved, want)
	}
	var filter map[string]string
	var runIDs []uuid.UUID
	if err := st.Pool().QueryRow(ctx, replaceSchema(`SELECT filter, run_ids FROM {schema}.audit_log
		WHERE action = 'move' AND runs = 4 AND note = 'INC-7'`, st.Schema())).Scan(&filter, &runIDs); err != nil {
		t.Fatalf("the move's audit row: %v", err)
	}
	slices.SortFunc(runIDs, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	if filter["from_build"] != "v1" || filter["to_build"] != "v2" || filter["workflow"] != "pinned" || !slices.Equal(runIDs, ids) {
		t.Fatalf("audit filter %v, runs %v; want v1 to v2 of pinned, %v", filter, runIDs, ids)
	}
	if orphans, err := st.OrphanedRuns(ctx); err != nil || len(orphans) != 0 {
		t.Fatalf("orphaned runs after the move: %+v, %v; want none", orphans, err)
	}
	v2 := buildStore(t, st, "v2", "pinned")
	if got := claimIDs(t, v2, "pinned"); !slices.Equal(got, sortIDs(ids[2], ids[3])) {
		t.Fatalf("v2 claimed %v after the move, want the queued runs %v", got, ids[2:])
	}
	// Unpinning: to "" any build claims them.
	if _, err := st.MoveRuns(ctx, store.MoveFilter{From: "v2", To: ""}, store.MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int64](t, st, `SELECT count(*) FROM {schema}.runs WHERE pinned_to <> ''`); n != 0 {
		t.Fatalf("%d runs still pinned after unpinning", n)
	}
}

func sortIDs(ids ...uuid.UUID) []uuid.UUID {
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	return ids
}

// beat registers a live worker of build serving workflows on queue default.
func beat(t *testing.T, st *store.Store, build string, workflows ...string) {
	t.Helper()
	exec(t, st.Pool(), st.Schema(), `
		INSERT INTO {schema}.workers (id, label, host, pid, version, workflows, queues, concurrency, heartbeat_ms, lease_ttl_ms, build_id)
		VALUES ($1, 'w', 'h', 1, 'test', $2, '{default}', 10, 1000, 30000, $3)`, uuid.New(), workflows, build)
}
