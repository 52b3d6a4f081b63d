package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestCLI_EveryCommandThatTakesARunTakesItsKey: show, explain, signal,
// cancel, result, delete and requeue find the run by --key as by its ID;
// a key nobody holds is "not found" (exit 3), and an ID with --key, or
// neither, is a usage error.
func TestCLI_EveryCommandThatTakesARunTakesItsKey(t *testing.T) {
	f := newFixtures(t)
	s := f.schema
	failed := f.run("refund-order", "failed", `run_key = 'order-1', error_message = 'bank unreachable'`)
	f.exec(`INSERT INTO {schema}.steps (run_id, step, activity, status, policy, reason, error_message)
		VALUES ($1, 1, 'refund', 'failed', '{"max_attempts": 3}', 'retries_exhausted', 'bank unreachable')`, failed)
	f.exec(`INSERT INTO {schema}.failures (run_id, workflow, reason, step, activity, attempts, errors, error_message)
		VALUES ($1, 'refund-order', 'retries_exhausted', 1, 'refund', 3, 3, 'bank unreachable')`, failed)
	waiting := f.run("approval", "queued", `run_key = 'order-2', started_at = now(), waiting_for = 'signal:approve', run_after = 'infinity'`)
	done := f.run("ship-only", "completed", `run_key = 'order-3', output = '{"shipped": 3}'`)

	expect(t, tenure(t, s, "runs", "show", "--key", "order-1"), 0, failed.String(), "step 1  refund  failed")
	expect(t, tenure(t, s, "explain", "--key", "order-1", "1"), 0, fmt.Sprintf("run %s step 1 (refund)", failed), "max_attempts=3")
	expect(t, tenure(t, s, "runs", "signal", "--key", "order-2", "approve", `"yes"`), 0, fmt.Sprintf(`"approve" to run %s`, waiting))
	expect(t, tenure(t, s, "runs", "cancel", "--key", "order-2", "--note", "INC-3"), 0, "cancel requested for run "+waiting.String())
	r := tenure(t, s, "runs", "result", "--key", "order-3")
	if r.code != 0 || r.stdout != `{"shipped": 3}`+"\n" {
		t.Fatalf("runs result --key order-3: want the output alone on stdout\n%s", r)
	}
	expect(t, tenure(t, s, "failures", "requeue", "--key", "order-1", "--dry-run"), 0, failed.String(),
		"1 run would be requeued (dry run: nothing changed)")
	expect(t, tenure(t, s, "runs", "delete", "--key", "order-3", "--note", "test order"), 0, "deleted run "+done.String())
	expect(t, tenure(t, s, "runs", "show", done.String()), 3, "not found")

	for _, args := range [][]string{
		{"runs", "show", "--key", "nope"},
		{"explain", "--key", "nope", "1"},
		{"runs", "signal", "--key", "nope", "approve"},
		{"runs", "cancel", "--key", "nope"},
		{"runs", "result", "--key", "nope"},
		{"runs", "delete", "--key", "nope"},
		{"failures", "requeue", "--key", "nope"},
	} {
		if r := tenure(t, s, args...); r.code != 3 || !strings.Contains(r.stderr, `run with key "nope": not found`) {
			t.Errorf("tenure %s:\n%s\nwant exit 3, not found", strings.Join(args, " "), r)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "cancel", failed.String(), "--key", "order-1"}, "give a run ID or --key, not both"},
		{[]string{"runs", "result", "--key", "order-1", failed.String()}, "give a run ID or --key, not both"},
		{[]string{"runs", "delete", failed.String(), "--key", "order-1"}, "give a run ID or --key, not both"},
		{[]string{"runs", "signal", "--key", "order-2", waiting.String(), "approve"}, "give a run ID or --key, not both"},
		{[]string{"explain", "--key", "order-1"}, "tenure explain --key KEY takes 1 argument, got 0"},
		{[]string{"explain", "--key", "order-1", "x"}, `invalid step "x"`},
		{[]string{"runs", "signal", "--key", "order-2"}, "tenure runs signal --key KEY takes 1 to 2 arguments, got 0"},
		{[]string{"runs", "signal", waiting.String()}, "tenure runs signal takes 2 to 3 arguments, got 1"},
		{[]string{"runs", "result"}, "give a run ID or --key KEY (see tenure runs result --help)"},
		{[]string{"runs", "delete", "--key", ""}, "--key: empty key"},
		{[]string{"runs", "delete", "order-3"}, `invalid run ID "order-3": want a UUID (to find a run by its key: tenure runs delete --key order-3)`},
		{[]string{"failures", "requeue", failed.String(), "--activity", "refund"}, "give run IDs (or --key) or a filter, not both"},
		{[]string{"failures", "requeue", "--key", "order-1", "--all"}, "give run IDs (or --key) or a filter, not both"},
	} {
		if r := tenure(t, s, c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("tenure %s:\n%s\nwant exit 2 and %q", strings.Join(c.args, " "), r, c.want)
		}
	}
}

// TestCLI_RequeueByIDOrKeyHasADryRun is issue #20's "failures requeue <id>
// --dry-run says give run IDs or a filter, not both": the dry run of runs
// given by ID or key lists what would go back, says which would not and
// why, exits as the requeue would, and changes nothing.
func TestCLI_RequeueByIDOrKeyHasADryRun(t *testing.T) {
	f := newFixtures(t)
	s := f.schema
	failedRun := func(key string) uuid.UUID {
		id := f.run("refund-order", "failed", "run_key = '"+key+"'")
		f.exec(`INSERT INTO {schema}.failures (run_id, workflow, reason, error_message) VALUES ($1, 'refund-order', 'workflow_error', 'bank unreachable')`, id)
		return id
	}
	a, b := failedRun("a"), failedRun("b")
	done := f.run("refund-order", "completed", "")
	unknown := uuid.New()
	state := func() string {
		var st string
		f.query(`SELECT string_agg(status, ',' ORDER BY run_key) || ' ' || (SELECT count(*) FROM {schema}.audit_log)
			FROM {schema}.runs WHERE run_key IS NOT NULL`, nil, &st)
		return st
	}
	before := state()

	r := tenure(t, s, "failures", "requeue", a.String(), "--key", "b", "--dry-run")
	expect(t, r, 0, "RUN", a.String(), b.String(), "bank unreachable", "2 runs would be requeued (dry run: nothing changed)")
	r = tenure(t, s, "failures", "requeue", a.String(), done.String(), unknown.String(), "--dry-run")
	expect(t, r, 1, a.String(), "1 run would be requeued (dry run: nothing changed)",
		fmt.Sprintf("tenure: run %s is completed: run is not failed", done), fmt.Sprintf("tenure: run %s: not found", unknown),
		"tenure: 2 of 3 runs would not be requeued")
	if strings.Contains(r.stdout, done.String()) {
		t.Fatalf("the dry run lists a completed run as requeued\n%s", r)
	}
	expect(t, tenure(t, s, "failures", "requeue", unknown.String(), "--dry-run"), 3, "1 of 1 run not found")

	r = tenure(t, s, "failures", "requeue", a.String(), done.String(), "--dry-run", "--json")
	var rows []struct {
		RunID        uuid.UUID `json:"run_id"`
		Requeued     bool      `json:"requeued"`
		WouldRequeue *bool     `json:"would_requeue"`
		Error        string    `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || r.code != 1 || len(rows) != 2 ||
		rows[0].RunID != a || rows[0].Requeued || rows[0].WouldRequeue == nil || !*rows[0].WouldRequeue ||
		rows[1].WouldRequeue == nil || *rows[1].WouldRequeue || !strings.Contains(rows[1].Error, "run is not failed") {
		t.Fatalf("failures requeue --dry-run --json: %+v, %v\n%s", rows, err, r)
	}
	if after := state(); after != before {
		t.Fatalf("the dry runs changed the runs or the audit log: %s, was %s", after, before)
	}

	// For real: by key and by ID, each audited with the note.
	expect(t, tenure(t, s, "failures", "requeue", "--key", "a", b.String(), "--note", "INC-20"), 0,
		"requeued "+a.String()+"\n", "requeued "+b.String()+"\n")
	var notes string
	f.query(`SELECT string_agg(note, ',') FROM {schema}.audit_log WHERE action = 'requeue'`, nil, &notes)
	if st := state(); st != "queued,queued 2" || notes != "INC-20,INC-20" {
		t.Fatalf("after the requeue: %s, notes %s; want both queued, two audit rows with the note", st, notes)
	}
}
