package ui_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/ui"
)

// A run's sleeps, signals and children are marks of their own on its
// timeline, and parent and child link to each other.
func TestRunTimeline_MarksSleepsSignalsAndChildren(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	ids := f.fabricate(storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1},
		storetest.Outcome{Workflow: "shipping", Activity: "label", Errors: 0})
	parent, child := ids[0], ids[1]
	s := pgx.Identifier{f.schema}.Sanitize()
	for _, stmt := range []string{
		`INSERT INTO ` + s + `.steps (run_id, step, activity, status, policy, kind, first_started_at, due_at, finished_at)
		 VALUES ($1, 2, 'sleep', 'completed', '{}', 'sleep', now() - interval '1 hour', now() - interval '30 minutes', now() - interval '30 minutes')`,
		`INSERT INTO ` + s + `.steps (run_id, step, activity, status, policy, kind, first_started_at, finished_at)
		 VALUES ($1, 3, 'approve', 'completed', '{}', 'signal', now() - interval '30 minutes', now() - interval '20 minutes')`,
		`INSERT INTO ` + s + `.signals (run_id, name, payload, consumed_step, consumed_at) VALUES ($1, 'approve', '{}', 3, now() - interval '20 minutes')`,
		`INSERT INTO ` + s + `.steps (run_id, step, activity, status, policy, kind, first_started_at, finished_at, child_run_id)
		 VALUES ($1, 4, 'shipping', 'completed', '{}', 'child', now() - interval '20 minutes', now() - interval '10 minutes', $2)`,
		`UPDATE ` + s + `.runs SET parent_run_id = $1, parent_step = 4 WHERE id = $2`,
	} {
		args := []any{parent}
		if strings.Contains(stmt, "$2") {
			args = append(args, child)
		}
		if _, err := f.pool.Exec(t.Context(), stmt, args...); err != nil {
			t.Fatal(err)
		}
	}
	body := want(t, f.get("runs/"+parent.String()), http.StatusOK, `<svg data-testid="timeline"`,
		`class="k-sleep"`, `class="m-sleep"`, `class="m-signal"`, `received signal #\d+`, `class="k-child c-completed"`,
		`<a href="../runs/`+child.String()+`" class="mono id"`, `data-testid="child-link" href="../runs/`+child.String()+`"`)
	if strings.Contains(body, `policy?run=`+parent.String()+`&amp;step=2`) {
		t.Fatal("a sleep step links to a retry policy")
	}
	want(t, f.get("runs/"+child.String()), http.StatusOK, `data-testid="parent-link" href="../runs/`+parent.String()+`"`)
	want(t, f.get("policy?run="+parent.String()+"&step=2"), http.StatusNotFound, `no retry policy`)
}
