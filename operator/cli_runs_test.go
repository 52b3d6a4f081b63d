package operator_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/pgtest"
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
		{"parent of a running child", doneParent, nil, "has 1 child still queued or running (wait for its children"},
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

	// The parent first, then its child; the other once its child ended.
	for _, id := range []uuid.UUID{failedParent, child} {
		if d, err := op.DeleteRun(t.Context(), id, ""); err != nil || d.Runs != 1 {
			t.Fatalf("DeleteRun(%s): %+v, %v", id, d, err)
		}
	}
	exec(`UPDATE {schema}.runs SET status = 'completed', finished_at = now(), lease_expires_at = NULL WHERE id = $1`, busyChild)
	if _, err := op.DeleteRun(t.Context(), doneParent, "INC-9"); err != nil {
		t.Fatal(err)
	}
	log, err := op.AuditLog(t.Context(), 10)
	if err != nil || len(log) != 3 || log[0].Action != "delete" || log[0].Note != "INC-9" ||
		len(log[0].RunIDs) != 1 || log[0].RunIDs[0] != doneParent || log[0].Filter["workflow"] != "w" {
		t.Fatalf("audit log after 3 deletes: %+v, %v", log, err)
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
