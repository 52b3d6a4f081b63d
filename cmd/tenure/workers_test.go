package main

import (
	"strings"
	"testing"

	"github.com/tenurehq/tenure/sdk"
)

// tenure workers lists the live worker with what it serves, and warns about
// queued runs no live worker serves; so does runs list, on stderr.
func TestCLI_WorkersAndOrphanedRuns(t *testing.T) {
	e := newEnv(t, shipOnly)
	if _, err := sdk.Start(t.Context(), e.client, checkAddress, order{ID: 1}); err != nil {
		t.Fatal(err)
	}
	r := tenure(t, e.schema, "workers")
	expect(t, r, 0, "cli-test-worker", "live", "ship-only", "default", sdk.Version,
		`warning: 1 run of workflow "check-address" on queue "default" waiting`, "no live worker serves them")
	r = tenure(t, e.schema, "runs", "list")
	expect(t, r, 0, "check-address")
	if !strings.Contains(r.stderr, `warning: 1 run of workflow "check-address"`) || strings.Contains(r.stdout, "warning") {
		t.Fatalf("runs list: the orphan warning belongs on stderr only:\n%s", r)
	}
	r = tenure(t, e.schema, "workers", "--json")
	expect(t, r, 0, `"workers"`, `"orphaned_runs"`, `"label": "cli-test-worker"`)
}
