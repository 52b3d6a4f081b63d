package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestCLI_DeleteTakesTheChildRunsAndLeavesNoKeyInTheAudit: a parent goes
// with its children, which a child of a failed parent alone cannot; the
// audit row names both runs and not the key the parent was started with.
func TestCLI_DeleteTakesTheChildRunsAndLeavesNoKeyInTheAudit(t *testing.T) {
	f := newFixtures(t)
	s := f.schema
	parent := f.run("signup", "failed", `run_key = 'ada@example.com'`)
	child := f.run("welcome-mail", "completed", fmt.Sprintf(`parent_run_id = '%s', parent_step = 1`, parent))
	f.exec(`INSERT INTO {schema}.failures (run_id, workflow, reason, error_message)
		VALUES ($1, 'signup', 'workflow_error', 'no'), ($2, 'welcome-mail', 'workflow_error', 'no')`, parent, child)
	f.exec(`UPDATE {schema}.failures SET requeued_at = now() WHERE run_id = $1`, child)

	expect(t, tenure(t, s, "runs", "delete", child.String()), 1,
		fmt.Sprintf("is a child of run %s, which is failed and may replay it (delete the parent run first (its child runs go with it)", parent))
	r := tenure(t, s, "runs", "delete", "--key", "ada@example.com", "--note", "GDPR-7: erasure request")
	if want := fmt.Sprintf("deleted run %s and 1 child run with their history (2 failure rows)\n", parent); r.code != 0 || r.stdout != want {
		t.Fatalf("runs delete of a parent:\n%s\nwant:\n%s", r, want)
	}
	expect(t, tenure(t, s, "runs", "show", child.String()), 3, "not found")

	r = tenure(t, s, "audit", "--json")
	expect(t, r, 0)
	var audit []struct {
		Action string            `json:"action"`
		Runs   int               `json:"runs"`
		Filter map[string]string `json:"filter"`
		RunIDs []string          `json:"run_ids"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &audit); err != nil || len(audit) != 1 || audit[0].Runs != 2 ||
		fmt.Sprint(audit[0].RunIDs) != fmt.Sprint([]string{parent.String(), child.String()}) || audit[0].Filter["run_id"] != parent.String() {
		t.Fatalf("audit after the delete: %+v, %v\n%s", audit, err, r)
	}
	if strings.Contains(r.stdout, "ada@example.com") {
		t.Fatalf("the audit log keeps the deleted run's key\n%s", r)
	}
}
