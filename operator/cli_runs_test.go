package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// TestDeleteRun_RefusesWhatAnotherRunOrAWorkerStillNeeds: a run queued or
// running, a child its parent may replay, and a parent whose children have
// not ended are refused with nothing deleted and no audit row; what is
// refused becomes deletable once nothing needs it.
func TestDeleteRun_RefusesWhatAnotherRunOrAWorkerStillNeeds(t *testing.T) {
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), strings.ReplaceAll(sql, "{schema}", schema), args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	run := func(status string, parent uuid.UUID) uuid.UUID {
		t.Helper()
		id := uuid.New()
		exec(`INSERT INTO {schema}.runs (id, workflow, input, status, finished_at, started_at, lease_expires_at, parent_run_id, parent_step)
			VALUES ($1, 'w', '{}', $2, CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN now() END, now(),
			        CASE WHEN $2 = 'running' THEN now() + interval '1 minute' END,
			        nullif($3, '00000000-0000-0000-0000-000000000000'::uuid), CASE WHEN $3 <> '00000000-0000-0000-0000-000000000000'::uuid THEN 1 END)`,
			id, status, parent)
		return id
	}
	audits := func() int {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.audit_log`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	queued, running := run("queued", uuid.Nil), run("running", uuid.Nil)
	failedParent := run("failed", uuid.Nil)
	child := run("completed", failedParent)
	doneParent := run("completed", uuid.Nil)
	busyChild := run("running", doneParent)
	grandparent := run("cancelled", uuid.Nil)
	busyGrandchild := run("running", run("cancelled", grandparent))
	for _, c := range []struct {
		name string
		id   uuid.UUID
		is   error
		want string
	}{
		{"unknown", uuid.New(), operator.ErrNotFound, "not found"},
		{"queued", queued, operator.ErrNotFinished, "is queued: run has not finished"},
		{"running", running, operator.ErrNotFinished, "is running: run has not finished"},
		{"child of a failed parent", child, nil, "is a child of run " + failedParent.String() + ", which is failed and may replay it (delete the parent run first"},
		{"parent of a running child", doneParent, nil, "has 1 child run still queued or running (wait for its child runs"},
		{"grandparent of a running child", grandparent, nil, "has 1 child run still queued or running"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := op.DeleteRun(t.Context(), c.id, "no")
			if err == nil || !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("DeleteRun: %v; want an error with %q (is %v)", err, c.want, c.is)
			}
		})
	}
	if n := audits(); n != 0 {
		t.Fatalf("refused deletes wrote %d audit rows", n)
	}
	if _, err := op.Run(t.Context(), child); err != nil {
		t.Fatalf("the refused child is gone: %v", err)
	}

	// The parent, with its child; the other once its child ended, with it.
	if d, err := op.DeleteRun(t.Context(), failedParent, ""); err != nil || d.Runs != 2 {
		t.Fatalf("DeleteRun of the failed parent: %+v, %v; want it and its child", d, err)
	}
	if _, err := op.Run(t.Context(), child); !errors.Is(err, operator.ErrNotFound) {
		t.Fatalf("the child of a deleted parent: %v; want it deleted with its parent", err)
	}
	if _, err := op.Run(t.Context(), busyGrandchild); err != nil {
		t.Fatalf("the running grandchild of a refused delete is gone: %v", err)
	}
	exec(`UPDATE {schema}.runs SET status = 'completed', finished_at = now(), lease_expires_at = NULL WHERE id = $1`, busyChild)
	if d, err := op.DeleteRun(t.Context(), doneParent, "INC-9"); err != nil || d.Runs != 2 {
		t.Fatalf("DeleteRun of the parent whose child ended: %+v, %v; want both", d, err)
	}
	log, err := op.AuditLog(t.Context(), 10)
	if err != nil || len(log) != 2 || log[0].Action != "delete" || log[0].Note != "INC-9" ||
		!slices.Equal(log[0].RunIDs, []uuid.UUID{doneParent, busyChild}) || log[0].Filter["workflow"] != "w" {
		t.Fatalf("audit log after 2 deletes: %+v, %v", log, err)
	}
}

// TestDeleteRun_DeletesTheWholeHistoryAndItsChildRunsButKeepsNoKey: a
// failed run with every kind of history (steps, attempts, a signal, an
// event, a wake, an open and a requeued failure row), a finished child of it
// and a grandchild, each with a history of its own, are deleted in one
// call: no table of the schema keeps a row that names one of them, a run
// beside them keeps all of its own, the failure count returned is the rows
// deleted, and the audit row lists the three runs but holds the key
// nowhere.
func TestDeleteRun_DeletesTheWholeHistoryAndItsChildRunsButKeepsNoKey(t *testing.T) {
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), strings.ReplaceAll(sql, "{schema}", schema), args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	const key = "ada@example.com"
	ids := fabricate(pool, schema,
		storetest.Outcome{Workflow: "erase", Activity: "charge", Key: key, Errors: 2, Reason: sdk.ReasonNonRetryable},
		storetest.Outcome{Workflow: "erase-child", Activity: "mail", Errors: 1, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "erase-grandchild", Activity: "log", Errors: 1},
		storetest.Outcome{Workflow: "erase", Activity: "charge", Key: "bob@example.com", Errors: 2, Reason: sdk.ReasonNonRetryable})
	root, child, grandchild, beside := ids[0], ids[1], ids[2], ids[3]
	exec(`UPDATE {schema}.runs SET parent_run_id = $1, parent_step = 1 WHERE id = $2`, root, child)
	exec(`UPDATE {schema}.runs SET parent_run_id = $1, parent_step = 1 WHERE id = $2`, child, grandchild)
	for _, id := range []uuid.UUID{root, child, beside} {
		exec(`INSERT INTO {schema}.signals (run_id, name, payload) VALUES ($1, 'approve', '{"by": "ada"}')`, id)
		exec(`INSERT INTO {schema}.events (run_id, key, value, step) VALUES ($1, 'progress', '1', 1)`, id)
		exec(`INSERT INTO {schema}.wakes (run_id, kind) VALUES ($1, 'cancel')`, id)
		exec(`INSERT INTO {schema}.failures (run_id, workflow, reason, requeued_at, requeue_count)
			VALUES ($1, 'erase', 'retries_exhausted', now() - interval '1 hour', 1)`, id)
	}

	// Every table with a column that names a run, and how many of its rows
	// name each run: new tables are counted without changing this test.
	var cols [][2]string
	rows, err := pool.Query(t.Context(), `SELECT c.table_name, c.column_name FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = $1 AND t.table_type = 'BASE TABLE' AND c.data_type = 'uuid'
		  AND (c.column_name LIKE '%run_id' OR (c.table_name = 'runs' AND c.column_name = 'id'))
		ORDER BY 1, 2`, schema)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c [2]string
		if err := rows.Scan(&c[0], &c[1]); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	if rows.Err() != nil || len(cols) < 8 {
		t.Fatalf("columns that name a run: %v, %v", cols, rows.Err())
	}
	naming := func(id uuid.UUID) map[string]int {
		t.Helper()
		out := map[string]int{}
		for _, c := range cols {
			var n int
			q := fmt.Sprintf(`SELECT count(*) FROM %s.%s WHERE %s = $1`, schema, c[0], c[1])
			if err := pool.QueryRow(t.Context(), q, id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				out[c[0]+"."+c[1]] = n
			}
		}
		return out
	}
	for _, tbl := range []string{"runs.id", "steps.run_id", "attempts.run_id", "signals.run_id", "events.run_id", "wakes.run_id", "failures.run_id"} {
		if naming(root)[tbl] == 0 {
			t.Fatalf("the run to delete has no row in %s: the test builds no full history\n%v", tbl, naming(root))
		}
	}
	besideBefore := naming(beside)
	failures := func() (n int64) {
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.failures`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	failuresBefore := failures()

	d, err := op.DeleteRun(t.Context(), root, "GDPR-7: erasure request")
	if err != nil {
		t.Fatal(err)
	}
	if gone := failuresBefore - failures(); d.Runs != 3 || d.Failures != gone || gone != 4 {
		t.Fatalf("DeleteRun: %+v; %d failure rows went, want 3 runs and 4 failure rows (2 of the run, 2 of its child)", d, gone)
	}
	for _, id := range []uuid.UUID{root, child, grandchild} {
		if left := naming(id); len(left) > 0 {
			t.Errorf("rows naming deleted run %s are left: %v", id, left)
		}
	}
	if after := naming(beside); !maps.Equal(after, besideBefore) {
		t.Errorf("the run beside lost rows: %v, had %v", after, besideBefore)
	}

	log, err := op.AuditLog(t.Context(), 1)
	if err != nil || len(log) != 1 {
		t.Fatalf("audit log: %+v, %v", log, err)
	}
	a := log[0]
	if a.Action != "delete" || a.Runs != 3 || a.Failures != 4 || !slices.Equal(a.RunIDs, []uuid.UUID{root, child, grandchild}) ||
		a.Filter["run_id"] != root.String() || a.Filter["workflow"] != "erase" || a.Filter["status"] != "failed" || a.Note != "GDPR-7: erasure request" {
		t.Fatalf("audit row of the delete: %+v", a)
	}
	var raw string
	if err := pool.QueryRow(t.Context(), `SELECT row_to_json(a)::text FROM `+schema+`.audit_log a WHERE id = $1`, a.ID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(raw, key) || strings.Contains(raw, `"key"`) {
		t.Fatalf("the audit row keeps the deleted run's key: %s", raw)
	}
}

// TestMigration14_KeepsTheAuditActionsBefore: the audit log still takes
// every action it took before, and delete.
func TestMigration14_KeepsTheAuditActionsBefore(t *testing.T) {
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"requeue", "purge_completed", "purge_failures", "cancel", "delete"} {
		if _, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.audit_log (action, runs) VALUES ($1, 0)`, action); err != nil {
			t.Errorf("action %s: %v", action, err)
		}
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+schema+`.audit_log (action, runs) VALUES ('nonsense', 0)`); err == nil {
		t.Error("the audit log takes any action")
	}
}

// TestStart_RefusesWhatSdkStartRefuses: names, delays and inputs are
// checked before anything is sent, and a key keeps to its workflow.
func TestStart_RefusesWhatSdkStartRefuses(t *testing.T) {
	op, _, _ := newOperator(t)
	if _, err := op.Start(t.Context(), "a", json.RawMessage(`1`), operator.StartOptions{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		workflow string
		input    string
		o        operator.StartOptions
		is       error
		want     string
	}{
		{"no workflow", "", "1", operator.StartOptions{}, nil, "empty workflow name"},
		{"not JSON", "a", "{", operator.StartOptions{}, nil, "the input is not JSON"},
		{"negative delay", "a", "1", operator.StartOptions{Delay: -1}, nil, "negative delay"},
		{"too large", "a", `"` + strings.Repeat("x", sdk.DefaultMaxPayload) + `"`, operator.StartOptions{}, sdk.ErrPayloadTooLarge, "limit"},
		{"key of another workflow", "b", "1", operator.StartOptions{Key: "k"}, sdk.ErrWorkflowMismatch, `of workflow "a"`},
		{"key with another input", "a", "2", operator.StartOptions{Key: "k"}, sdk.ErrKeyConflict, "another input"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := op.Start(t.Context(), c.workflow, json.RawMessage(c.input), c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("Start: %v; want an error with %q (is %v)", err, c.want, c.is)
			}
		})
	}
	if n, err := op.CountRuns(t.Context(), operator.RunSearch{}); err != nil || n != 1 {
		t.Fatalf("runs after the refused starts: %d, %v; want the first alone", n, err)
	}
}

// TestStart_RefusesWithTheWordsOfSdkStart: operator.Start and sdk.Start
// share their checks (internal/store's NewRun.Check and Inserted.Check),
// so the same bad start is refused by both with the same error.
func TestStart_RefusesWithTheWordsOfSdkStart(t *testing.T) {
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	wf := func(name string) *sdk.Workflow[string, string] {
		return sdk.NewWorkflow(name, func(context.Context, string) (string, error) { return "", nil })
	}
	a, b := wf("a"), wf("b")
	held, err := sdk.Start(t.Context(), client, a, "first", sdk.WithKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", sdk.DefaultMaxPayload)
	for _, c := range []struct {
		name  string
		wf    *sdk.Workflow[string, string]
		input string
		sdk   []sdk.StartOption
		op    operator.StartOptions
		is    error
	}{
		{"negative delay", a, "x", []sdk.StartOption{sdk.WithDelay(-time.Second)}, operator.StartOptions{Delay: -time.Second}, nil},
		{"too large", a, big, nil, operator.StartOptions{}, sdk.ErrPayloadTooLarge},
		{"key of another workflow", b, "first", []sdk.StartOption{sdk.WithKey("k")}, operator.StartOptions{Key: "k"}, sdk.ErrWorkflowMismatch},
		{"key with another input", a, "second", []sdk.StartOption{sdk.WithKey("k")}, operator.StartOptions{Key: "k"}, sdk.ErrKeyConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, serr := sdk.Start(t.Context(), client, c.wf, c.input, c.sdk...)
			input, _ := json.Marshal(c.input)
			_, oerr := op.Start(t.Context(), c.wf.Name(), input, c.op)
			if serr == nil || oerr == nil || serr.Error() != oerr.Error() || (c.is != nil && (!errors.Is(serr, c.is) || !errors.Is(oerr, c.is))) {
				t.Fatalf("sdk.Start: %v\noperator.Start: %v\nwant the same error (is %v)", serr, oerr, c.is)
			}
		})
	}
	if n, err := op.CountRuns(t.Context(), operator.RunSearch{}); err != nil || n != 1 {
		t.Fatalf("runs after the refused starts: %d, %v; want %s alone", n, err, held.ID)
	}
}
