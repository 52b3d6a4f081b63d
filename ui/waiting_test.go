package ui_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/ui"
)

// Every queued run says what it waits for: a sleep until a time, a signal,
// a child run, the end of a backoff after a failed attempt, or a worker,
// and whether a live worker serves its workflow on its queue at all.
func TestRunPage_SaysWhatAQueuedRunWaitsFor(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	s := pgx.Identifier{f.schema}.Sanitize()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := f.pool.Exec(t.Context(), strings.ReplaceAll(sql, "{schema}", s), args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	waits := func(id string, patterns ...string) string {
		t.Helper()
		body := want(t, f.get("runs/"+id), http.StatusOK, `data-testid="run-status">queued<`)
		i := strings.Index(body, `data-testid="waiting-for">`)
		if i < 0 {
			t.Fatalf("run %s: no waiting-for:\n%s", id, firstLines(body, 40))
		}
		line := htmlUnescape(body[i : i+strings.Index(body[i:], "</dd>")])
		for _, p := range patterns {
			if !strings.Contains(line, p) {
				t.Errorf("run %s waits for %q, want it to say %q", id, line, p)
			}
		}
		return line
	}

	// No worker at all: it is due, and nobody serves it.
	ghost := f.queue("orders").String()
	waits(ghost, "<b>a free worker</b>: due since", "no live worker serves <code>orders</code> on queue <code>default</code>")

	// Once a worker serves orders on default, only its turn.
	f.beat("worker-a", "orders")
	f.mount(ui.Config{}) // a new handler: the banner's cached orphans are read again
	if line := waits(ghost, "<b>a free worker</b>: due since"); strings.Contains(line, "no live worker") {
		t.Errorf("served run: %q", line)
	}

	sleeping := f.queue("orders").String()
	exec(`INSERT INTO {schema}.steps (run_id, step, activity, status, policy, kind, first_started_at, due_at)
	      VALUES ($1, 2, 'sleep', 'waiting', '{}', 'sleep', now(), now() + interval '3 hours')`, sleeping)
	exec(`UPDATE {schema}.runs SET waiting_for = 'sleep', run_after = now() + interval '3 hours', started_at = now() WHERE id = $1`, sleeping)
	waits(sleeping, "<b>sleep</b> (step 2) until", "(in 2h)")

	signal := f.queue("orders").String()
	exec(`INSERT INTO {schema}.steps (run_id, step, activity, status, policy, kind, first_started_at)
	      VALUES ($1, 3, 'approve', 'waiting', '{}', 'signal', now())`, signal)
	exec(`UPDATE {schema}.runs SET waiting_for = 'signal:approve', run_after = 'infinity', started_at = now() WHERE id = $1`, signal)
	waits(signal, "<b>signal <code>approve</code></b> (step 3), no timeout")

	child := f.queue("shipping").String()
	parent := f.queue("orders").String()
	exec(`INSERT INTO {schema}.steps (run_id, step, activity, status, policy, kind, first_started_at, child_run_id)
	      VALUES ($1, 4, 'shipping', 'waiting', '{}', 'child', now(), $2)`, parent, child)
	exec(`UPDATE {schema}.runs SET waiting_for = 'child:' || $2, run_after = 'infinity', started_at = now() WHERE id = $1`, parent, child)
	waits(parent, "<b>child run</b>", `href="../runs/`+child+`"`, "(shipping, queued), step 4 to end")

	// A failed attempt whose delay was long: the worker let the run go, due
	// at the delay's end, waiting_for NULL.
	backoff := f.queue("orders").String()
	exec(`INSERT INTO {schema}.steps (run_id, step, activity, status, policy, first_started_at)
	      VALUES ($1, 1, 'charge', 'running', '{}', now() - interval '1 minute')`, backoff)
	exec(`INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, started_at, ended_at, error_message, error_type,
	                                    delay_ms, delay_source, epoch, worker)
	      VALUES ($1, 1, 1, 'charge', 'failed', now() - interval '1 minute', now() - interval '59 seconds', 'HTTP 503 from the bank',
	              '*url.Error', 600000, 'retry-after', 1, 'worker-a')`, backoff)
	exec(`UPDATE {schema}.runs SET run_after = now() + interval '9 minutes', started_at = now() - interval '1 minute' WHERE id = $1`, backoff)
	waits(backoff, "<b>backoff</b> until", "attempt 1 of step 1 charge failed (HTTP 503 from the bank (*url.Error)), delay 10m0s (retry-after)")

	// A run started with a delay: its due time.
	later := f.queue("orders").String()
	exec(`UPDATE {schema}.runs SET run_after = now() + interval '1 hour' WHERE id = $1`, later)
	waits(later, "<b>its due time</b>")
}
