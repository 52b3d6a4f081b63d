package store

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/pgtest"
)

// TestCommit_EveryStatementFindsItsRowsByKey: each statement of a commit
// reads only the rows of its batch, each through its key, in the plan
// PostgreSQL caches for the prepared statement (the commit forces generic
// plans, see planWrite), and none is JIT-compiled even when the server
// compiles everything (jit_above_cost = 0), whatever the tables' statistics
// say:
//
//   - young: the tables analyzed while empty, then written (a new
//     deployment, or bench/'s runs, before autovacuum analyzes them: the
//     plans cached then read whole tables, or all running runs, per commit);
//   - history: 100,000 finished runs, analyzed before the runs held now
//     were claimed (none running in the statistics: the plans cached then
//     read the partial index of running runs whole, for each run);
//   - backlog: 100,000 queued runs in the statistics (the claim's generic
//     plan, not knowing its LIMIT, had hashed its rows against a scan of
//     the whole primary key: 606 ms a claim), and 50,000 fresh fair runs
//     of ten fairness keys.
func TestCommit_EveryStatementFindsItsRowsByKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name             string
		history, backlog int
		analyzeFirst     bool
	}{
		{"young", 5_000, 0, true},
		{"history", 100_000, 0, false},
		{"backlog", 10_000, 100_000, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkCommitPlans(t, c.history, c.backlog, c.analyzeFirst)
		})
	}
}

func checkCommitPlans(t *testing.T, history, backlog int, analyzeFirst bool) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	ctx := t.Context()
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	s, err := New(pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	analyze := func() {
		t.Helper()
		if _, err := pool.Exec(ctx, s.sql(`ANALYZE {schema}.runs, {schema}.steps, {schema}.attempts, {schema}.failures`)); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, s.sql(sql)); err != nil {
			t.Fatal(err)
		}
	}
	if analyzeFirst {
		analyze()
	}
	exec(fmt.Sprintf(`
		INSERT INTO {schema}.runs (id, workflow, input, status, output, started_at, finished_at)
		SELECT gen_random_uuid(), 'wf', '{}', 'completed', '1', now(), now() FROM generate_series(1, %d);
		INSERT INTO {schema}.steps (run_id, step, activity, status, policy, output, finished_at)
		SELECT id, 1, 'a', 'completed', '{}', '1', now() FROM {schema}.runs;
		INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, ended_at, epoch, worker)
		SELECT id, 1, 1, 'a', 'succeeded', now(), 1, 'w' FROM {schema}.runs;
		INSERT INTO {schema}.runs (id, workflow, input)
		SELECT gen_random_uuid(), 'wf', '{}' FROM generate_series(1, %d);
		INSERT INTO {schema}.runs (id, workflow, input, fair_key, fair_vt)
		SELECT gen_random_uuid(), 'wf', '{}', 'tenant-' || i %% 10, i::bigint * 1000000 FROM generate_series(1, %d) AS i;
		INSERT INTO {schema}.fair_queues (queue, vt) VALUES ('default', 0)`, history, backlog, backlog/2))
	if !analyzeFirst {
		analyze() // no run running when the statistics were taken
	}
	// The runs a worker holds now, not in the statistics.
	const held = 48 // a small batch, as with few callers
	exec(fmt.Sprintf(`
		INSERT INTO {schema}.runs (id, workflow, input, status, epoch, claimant, lease_expires_at, started_at)
		SELECT gen_random_uuid(), 'wf', '{}', 'running', 1, 'w', now() + interval '1 hour', now() FROM generate_series(1, %d);
		INSERT INTO {schema}.steps (run_id, step, activity, status, policy)
		SELECT id, 1, 'a', 'running', '{}' FROM {schema}.runs WHERE status = 'running';
		INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, epoch, worker)
		SELECT id, 1, 1, 'a', 'running', 1, 'w' FROM {schema}.runs WHERE status = 'running'`, held))
	rows, err := pool.Query(ctx, s.sql(`SELECT id FROM {schema}.runs WHERE status = 'running'`))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil || len(ids) != held {
		t.Fatalf("%d running runs, %v", len(ids), err)
	}

	// One batch holds every kind of the activity path's parts, each for a
	// share of the held runs, as a busy worker's commit does.
	delay := time.Second
	var c commitBatch
	for i, id := range ids {
		w := Write{Lease: Lease{RunID: id, Epoch: 1}}
		switch i % 12 {
		case 0:
			w.StepDone, w.CompleteRun = &StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)}, &RunOutput{Output: []byte(`1`)}
		case 1:
			w.StepDone = &StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)}
			w.StartAttempt = &AttemptStart{Step: 2, Attempt: 1, Activity: "a", Policy: []byte(`{}`), Worker: "w", InputHash: InputHash([]byte(`1`))}
		case 2:
			w.EndAttempt = &AttemptEnd{Step: 1, Attempt: 1, Status: AttemptFailed, ErrorMessage: "x", Delay: &delay, DelaySource: "policy"}
			w.Release = &Release{Delay: delay}
		case 3:
			w.FailStep = &StepFailure{Step: 1, Reason: "retries_exhausted", ErrorMessage: "x", End: &AttemptEnd{ErrorMessage: "x"}}
			w.FailRun = &Failure{Reason: "retries_exhausted", Step: 1, Activity: "a", Attempts: 1, Errors: 1, ErrorMessage: "x"}
		case 4:
			w.EndAttempt = &AttemptEnd{Step: 1, Attempt: 1, Status: AttemptCancelled, ErrorMessage: "x"}
			w.CancelRun = &RunCancel{Message: "x"}
		case 5:
			w.StartAttempt = &AttemptStart{Step: 1, Attempt: 2, Activity: "a", Policy: []byte(`{}`), Worker: "w"}
		case 6: // the durable primitives' parts
			w.Mark = &StepMark{Step: 2, Kind: KindSleep, Name: "sleep", Status: StepWaiting, Due: time.Hour}
			w.Release = &Release{WaitFor: "sleep", UntilStep: 2}
		case 7:
			w.Marks = []*StepMark{{Step: 2, Kind: KindSleep, Name: "sleep", Status: StepCompleted, Began: time.Now(), Woke: time.Now()},
				{Step: 3, Kind: KindPatch, Name: "p", Status: StepCompleted}} // a patch rides with the write
			w.Receive = &SignalReceive{Step: 3, Name: "go", Timeout: time.Hour}
			w.Release = &Release{WaitFor: "signal:go", UntilStep: 3}
		case 8:
			w.SetEvent = &EventSet{Step: 2, Key: "k", Value: []byte(`1`)}
			w.CompleteRun, w.WakeParent = &RunOutput{Output: []byte(`1`)}, true
		case 9:
			w.StartChild = &ChildStart{Step: 2, ID: ChildID(id, 2), Workflow: "wf", Queue: "default", Input: []byte(`{}`), InputHash: InputHash([]byte(`{}`))}
			w.Release = &Release{WaitFor: "child:" + ChildID(id, 2).String(), UntilStep: 2}
		case 10:
			w.CancelRun = &RunCancel{Message: "x"}
		case 11:
			w.Release = &Release{}
		}
		c.add(i, &w)
	}
	b := &pgx.Batch{}
	c.queue(s, b)
	if len(b.QueuedQueries) < 8 {
		t.Fatalf("%d statements queued, want every kind's", len(b.QueuedQueries))
	}
	sent := s.planned(pool, planWrite, b).QueuedQueries
	if want := s.sql(`CALL {schema}.planner('write')`); sent[0].SQL != want {
		t.Fatalf("the commit's first statement is %q, want %q", sent[0].SQL, want)
	}
	// A worker's store names its build there, and only there.
	built, err := New(pool, WithSchema(schema), WithBuild("v1.2.3+abc"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := built.planned(pool, planWrite, b).QueuedQueries[0].SQL, s.sql(`CALL {schema}.planner('write', 'v1.2.3+abc')`); got != want {
		t.Fatalf("a worker's commit's first statement is %q, want %q", got, want)
	}
	for _, q := range b.QueuedQueries {
		plan := explainGeneric(t, s, q.SQL, q.Arguments)
		for _, bad := range badAccess(plan, wideIndex) {
			t.Errorf("%s in the plan of\n%s\n%s", bad, q.SQL, plan)
		}
	}
	claim := s.sql(sqlClaim)
	claimArgs := []any{[]string{"wf", "other"}, []string{"default"}, 100, "w", int64(30_000), []string{"wf"}, "build-1"} // wf pinned
	// The heartbeat's renewal, likewise, as the custom plan it gets at each
	// call (planRenew).
	var leases []Lease
	for _, id := range ids {
		leases = append(leases, Lease{RunID: id, Epoch: 1})
	}
	// Without the planner's settings, a server that compiles everything
	// compiles these statements: the check above can fail.
	if plan := explainUnder(t, s, "", claim, claimArgs); !strings.Contains(plan, "JIT:") {
		t.Fatalf("the claim is not JIT-compiled at jit_above_cost = 0 without the planner settings: the check cannot fail\n%s", plan)
	}
	rec := &recorder{DB: pool}
	beat := &WorkerBeat{ID: uuid.New(), Label: "w", Host: "h", PID: 1, Version: "test", Workflows: []string{"wf"},
		Queues: []string{"default"}, Concurrency: held, Held: held, Interval: time.Second, TTL: time.Minute}
	if _, err := s.Renew(ctx, rec, leases, time.Minute, beat); err != nil { // as a worker sends it, with its registry row
		t.Fatal(err)
	}
	if len(rec.queries) != 2 || rec.queries[0].SQL != s.sql(`CALL {schema}.planner('renew')`) {
		t.Fatalf("the renewal's batch: %v, want the renew planner and the renewal", rec.queries)
	}
	for _, q := range rec.queries[1:] {
		plan := explain(t, s, planRenew, q.SQL, q.Arguments)
		for _, bad := range badAccess(plan, wideIndex) {
			t.Errorf("%s in the plan of the renewal\n%s\n%s", bad, q.SQL, plan)
		}
	}
	// The claim reads the queued and expired runs of its workflows through
	// the indexes made for it, each range by its Index Cond.
	plan := explainGeneric(t, s, claim, claimArgs)
	for _, bad := range badAccess(plan, notForClaims) {
		t.Errorf("%s in the plan of the claim\n%s\n%s", bad, claim, plan)
	}
	for _, want := range []string{"runs_claim_idx", "runs_lease_idx", "runs_fair_idx"} {
		if !strings.Contains(plan, want) {
			t.Errorf("the claim does not read %s:\n%s", want, plan)
		}
	}
	// The unpinned runs and those pinned to the worker's build (schema
	// version 19) are each a range of runs_claim_idx and runs_lease_idx,
	// pinned_to in its Index Cond: a backlog pinned to another build is
	// never read.
	if n := strings.Count(plan, "pinned_to = ''::text"); n < 2 || strings.Count(plan, "pinned_to = $7") < 2 {
		t.Errorf("the claim does not read its unpinned and pinned runs by their pinned_to:\n%s", plan)
	}
	for _, l := range strings.Split(plan, "\n") {
		if strings.Contains(l, "pinned_to") && !strings.Contains(l, "Index Cond:") {
			t.Errorf("the claim filters on pinned_to rather than reading its range: %s\n%s", strings.TrimSpace(l), plan)
		}
	}
	// A worker's minute check for runs pinned to builds nobody runs skips
	// through the builds of runs_pinned_idx, and reads no other index of
	// runs (planWrite, as the worker sends it).
	plan = explain(t, s, planWrite, s.sql(sqlStranded), []any{[]string{"wf", "other"}, []string{"default"}, strandedCount})
	for _, bad := range badAccess(plan, wideIndex) {
		t.Errorf("%s in the plan of the stranded runs' check\n%s", bad, plan)
	}
	if !strings.Contains(plan, "runs_pinned_idx") {
		t.Errorf("the stranded runs' check does not read runs_pinned_idx:\n%s", plan)
	}
	// A repeat's gives (sqlFlowAgain) look their attempts up by key.
	giveArgs := []any{[]uuidParam{uuidArg(ids[0]), uuidArg(ids[1])}, []int64{1, 1}, []string{"api", "api"}, []string{"", ""}, []string{"ok", "error"},
		[]uuidParam{}, []int64{}, []int32{}, []int32{}, []string{}, []string{}, []bool{}, []string{}, "w", true, []*int32{nil, nil},
		[]int32{1, 1}, []int32{1, 2}, false, nil, nil, nil, nil, nil, nil, nil, nil, nil, "w"}
	plan = explainGeneric(t, s, s.sql(sqlFlowAgain), giveArgs)
	for _, bad := range badAccess(plan, wideIndex) {
		t.Errorf("%s in the plan of a repeat's gives\n%s", bad, plan)
	}
	if !attemptsKey.MatchString(plan) {
		t.Errorf("a repeat's gives do not read attempts' primary key:\n%s", plan)
	}
	// The clock advances a claim's batch carries look each queue up by key.
	plan = explainGeneric(t, s, s.sql(sqlAdvanceClock), []any{[]string{"default", "other"}, []int64{5, 7}})
	for _, bad := range badAccess(plan, wideIndex) {
		t.Errorf("%s in the plan of the clock advance\n%s", bad, plan)
	}
	if !strings.Contains(plan, "fair_queues_pkey") {
		t.Errorf("the clock advance does not read fair_queues_pkey:\n%s", plan)
	}
	// A Start with fairness keys (a new one and one of the backlog's)
	// reads the keys' and the queue's rows by key, as a client sends it
	// (planHot).
	ins := s.newInsert([]NewRun{
		{ID: uuid.New(), Workflow: "wf", Queue: "default", Input: []byte(`{}`), FairKey: "tenant-1", FairWeight: 1},
		{ID: uuid.New(), Workflow: "wf", Queue: "default", Input: []byte(`{}`), FairKey: "new", FairWeight: 3},
		{ID: uuid.New(), Workflow: "wf", Queue: "default", Input: []byte(`{}`)},
	})
	q := ins.batch().QueuedQueries[0]
	if !strings.Contains(q.SQL, "fair_keys") {
		t.Fatalf("the insert of fair runs is not sqlInsertFair:\n%s", q.SQL)
	}
	plan = explain(t, s, planHot, q.SQL, q.Arguments)
	for _, bad := range badAccess(plan, wideIndex) {
		t.Errorf("%s in the plan of the fair insert\n%s\n%s", bad, q.SQL, plan)
	}
}

// badAccess lists the access paths of a plan that read more than the rows
// of the batch: a table read whole (Seq Scan), an index read whole (an
// index scan whose next line is not its Index Cond), or an index that wide
// names (of runs by status, workflow or time: every running or queued run,
// or more).
func badAccess(plan string, wide *regexp.Regexp) []string {
	var bad []string
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		switch {
		case seqScan.MatchString(l), wide.MatchString(l):
			bad = append(bad, strings.TrimSpace(l))
		case strings.Contains(l, "Index Scan") || strings.Contains(l, "Index Only Scan"):
			if i+1 == len(lines) || !strings.Contains(lines[i+1], "Index Cond:") {
				bad = append(bad, strings.TrimSpace(l)+" (no Index Cond)")
			}
		}
	}
	return bad
}

var (
	// (steps and attempts are partitioned: attempts_0, attempts_20261207,
	// attempts_default, each with its own primary key's index.)
	seqScan     = regexp.MustCompile(`Seq Scan on (runs|(steps|attempts)(_[0-9a-z]+)?|failures|signals|events)\b`)
	attemptsKey = regexp.MustCompile(`attempts(_[0-9a-z]+)?_pkey`)
	wideIndex   = regexp.MustCompile(`runs_(lease|claim|workflow_status|created)_idx`)
	// notForClaims: the claim's own indexes are runs_claim_idx and runs_lease_idx.
	notForClaims = regexp.MustCompile(`runs_(workflow_status|created)_idx`)
)

// recorder is a DB that keeps the statements of the batches it sends.
type recorder struct {
	DB
	queries []*pgx.QueuedQuery
}

func (r *recorder) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		r.queries = append(r.queries, &pgx.QueuedQuery{SQL: q.SQL, Arguments: q.Arguments})
	}
	return r.DB.SendBatch(ctx, b)
}

// explainGeneric returns the generic plan of sql with args, as a commit's
// transaction plans it (planWrite); see explain.
func explainGeneric(t *testing.T, s *Store, sql string, args []any) string {
	t.Helper()
	return explain(t, s, planWrite, sql, args)
}

// explain returns the plan of sql with args under the planner settings of
// mode, read through PREPARE and EXPLAIN EXECUTE in a transaction that is
// rolled back, on a server that JIT-compiles every statement
// (jit_above_cost and the others at 0, as a server's settings may be): it
// fails the test when the plan would be compiled. The arguments are sent as
// literals (the simple protocol), which EXECUTE takes.
func explain(t *testing.T, s *Store, mode planMode, sql string, args []any) string {
	t.Helper()
	plan := explainUnder(t, s, s.sql(`CALL {schema}.planner('`+string(mode)+`')`), sql, args)
	if strings.Contains(plan, "JIT:") {
		t.Errorf("JIT-compiled at jit_above_cost = 0 under the %s planner settings:\n%s\n%s", mode, sql, plan)
	}
	return plan
}

// everythingCompiled is a server's settings that JIT-compile every
// statement, as SET LOCAL statements.
const everythingCompiled = `SET LOCAL jit = on; SET LOCAL jit_above_cost = 0; SET LOCAL jit_inline_above_cost = 0;
	SET LOCAL jit_optimize_above_cost = 0`

// explainUnder is explain with the settings statement settings (none: "").
func explainUnder(t *testing.T, s *Store, settings, sql string, args []any) string {
	t.Helper()
	pool := s.Pool()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	if _, err := tx.Exec(t.Context(), everythingCompiled); err != nil {
		t.Fatal(err)
	}
	if settings != "" {
		if _, err := tx.Exec(t.Context(), settings); err != nil {
			t.Fatal(err)
		}
	}
	// Prepared statements belong to the session, not the transaction.
	if _, err := tx.Exec(t.Context(), "PREPARE planned AS "+sql); err != nil {
		t.Fatalf("prepare: %v\n%s", err, sql)
	}
	marks := make([]string, len(args))
	for i := range args {
		marks[i] = fmt.Sprintf("$%d", i+1)
	}
	rows, err := tx.Query(t.Context(), "EXPLAIN EXECUTE planned("+strings.Join(marks, ", ")+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	if _, err := tx.Exec(t.Context(), "DEALLOCATE planned"); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}
