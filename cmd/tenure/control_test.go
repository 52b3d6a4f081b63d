package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// fixtures is a migrated schema with no worker, whose rows the test writes
// in SQL: a run stays in the state it is put in.
type fixtures struct {
	t      *testing.T
	schema string
	pool   *pgxpool.Pool
}

func newFixtures(t *testing.T) *fixtures {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	return &fixtures{t: t, schema: schema, pool: pool}
}

// exec runs statements with {schema} replaced.
func (f *fixtures) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(f.t.Context(), strings.ReplaceAll(sql, "{schema}", f.schema), args...); err != nil {
		f.t.Fatalf("%v\n%s", err, sql)
	}
}

// query scans the one row of sql into dst.
func (f *fixtures) query(sql string, args []any, dst ...any) {
	f.t.Helper()
	if err := f.pool.QueryRow(f.t.Context(), strings.ReplaceAll(sql, "{schema}", f.schema), args...).Scan(dst...); err != nil {
		f.t.Fatalf("%v\n%s", err, sql)
	}
}

// run inserts a run of workflow in status, with set (an SQL assignment list,
// or "") applied after.
func (f *fixtures) run(workflow, status, set string) uuid.UUID {
	f.t.Helper()
	id := uuid.New()
	f.exec(`INSERT INTO {schema}.runs (id, workflow, input, status, finished_at)
		VALUES ($1, $2, '{}', $3, CASE WHEN $3 IN ('completed', 'failed', 'cancelled') THEN now() END)`, id, workflow, status)
	if set != "" {
		f.exec(`UPDATE {schema}.runs SET `+set+` WHERE id = $1`, id)
	}
	return id
}

func TestCLI_SignalSendsOnceToALiveRunAndRefusesTheRest(t *testing.T) {
	f := newFixtures(t)
	s := f.schema
	waiting := f.run("approval", "queued", `started_at = now(), waiting_for = 'signal:approve', run_after = 'infinity'`)
	done := f.run("approval", "completed", "")
	signals := func() (n int) {
		f.query(`SELECT count(*) FROM {schema}.signals`, nil, &n)
		return n
	}

	r := tenure(t, s, "runs", "signal", waiting.String(), "approve", `{"by": "ada"}`)
	expect(t, r, 0, fmt.Sprintf(`"approve" to run %s`, waiting))
	var id int64
	var payload string
	var woken bool
	f.query(`SELECT s.id, s.payload::text, r.run_after <= now() FROM {schema}.signals s JOIN {schema}.runs r ON r.id = s.run_id
		WHERE s.run_id = $1 AND s.name = 'approve'`, []any{waiting}, &id, &payload, &woken)
	if want := fmt.Sprintf("sent signal %d \"approve\" to run %s\n", id, waiting); r.stdout != want {
		t.Fatalf("stdout %q, want %q", r.stdout, want)
	}
	if payload != `{"by": "ada"}` || woken {
		t.Fatalf("signal payload %s, run woken %v; want the payload sent, and the run left for a worker to wake", payload, woken)
	}
	// A worker wakes the run (apply_wakes), in a transaction of its own.
	var left int
	f.query(`SELECT busy FROM {schema}.apply_wakes(10)`, nil, &left)
	f.query(`SELECT run_after <= now() FROM {schema}.runs WHERE id = $1`, []any{waiting}, &woken)
	if left != 0 || !woken {
		t.Fatalf("after a worker applied the wakes: %d left, run woken %v; want the waiting run due now", left, woken)
	}

	// No payload is JSON null; --json gives the ID to scripts.
	r = tenure(t, s, "runs", "signal", waiting.String(), "note", "--json")
	expect(t, r, 0)
	var sent struct {
		RunID    uuid.UUID `json:"run_id"`
		Name     string    `json:"name"`
		SignalID int64     `json:"signal_id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sent); err != nil || sent.RunID != waiting || sent.Name != "note" || sent.SignalID <= id {
		t.Fatalf("runs signal --json: %+v, %v\n%s", sent, err, r)
	}
	f.query(`SELECT payload::text FROM {schema}.signals WHERE id = $1`, []any{sent.SignalID}, &payload)
	if payload != "null" {
		t.Fatalf("payload of a signal sent without one: %s, want null", payload)
	}

	// Refused before anything is sent, or by the database; each error once,
	// on one line, with one prefix.
	for _, c := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"payload not JSON", []string{waiting.String(), "approve", "yes"}, 2, []string{`payload "yes" is not JSON`, `'"yes"'`}},
		{"payload cut short", []string{waiting.String(), "approve", `{"by":`}, 2, []string{"is not JSON", "unexpected end of JSON input"}},
		{"unknown run", []string{uuid.NewString(), "approve"}, 3, []string{`send signal "approve" to run`, "not found"}},
		{"finished run", []string{done.String(), "approve"}, 1, []string{fmt.Sprintf("run %s is completed", done), "is completed: run already finished"}},
		{"empty name", []string{waiting.String(), ""}, 2, []string{"empty signal name"}},
		{"no name", []string{waiting.String()}, 2, []string{"takes 2 to 3 arguments, got 1"}},
		{"bad run ID", []string{"nope", "approve"}, 2, []string{"invalid run ID"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := tenure(t, s, append([]string{"runs", "signal"}, c.args...)...)
			expect(t, r, c.code, c.want...)
			errLine, _, _ := strings.Cut(r.stderr, "\n")
			if r.stdout != "" || strings.Count(r.stderr, "tenure:") != 1 || !strings.HasPrefix(r.stderr, "tenure: ") ||
				strings.Count(r.stderr, c.want[0]) != 1 || !strings.Contains(errLine, c.want[len(c.want)-1]) {
				t.Fatalf("want the error once, on one line, with one prefix\n%s", r)
			}
		})
	}
	if n := signals(); n != 2 {
		t.Fatalf("%d signals in the table, want the 2 sent", n)
	}
}

func TestCLI_CancelEndsAnUnstartedRunAndAsksTheWorkerOfAStartedOne(t *testing.T) {
	f := newFixtures(t)
	s := f.schema
	unstarted := f.run("approval", "queued", "")
	child := f.run("ship-only", "queued", fmt.Sprintf("parent_run_id = '%s', parent_step = 1", unstarted))
	started := f.run("approval", "queued", "started_at = now()")
	done := f.run("approval", "completed", "")
	status := func(id uuid.UUID) (st string, requested bool) {
		// Recorded on the run, or still a wake for a worker to apply.
		f.query(`SELECT status, cancel_requested_at IS NOT NULL OR EXISTS (SELECT FROM {schema}.wakes w WHERE w.run_id = r.id AND w.kind = 'cancel')
		         FROM {schema}.runs r WHERE id = $1`, []any{id}, &st, &requested)
		return st, requested
	}

	r := tenure(t, s, "runs", "cancel", unstarted.String())
	expect(t, r, 0)
	if want := fmt.Sprintf("cancelled run %s\n", unstarted); r.stdout != want {
		t.Fatalf("stdout %q, want %q", r.stdout, want)
	}
	for _, id := range []uuid.UUID{unstarted, child} {
		if st, _ := status(id); st != "cancelled" {
			t.Fatalf("run %s is %s after the cancel of an unstarted run (or its parent), want cancelled", id, st)
		}
	}

	r = tenure(t, s, "runs", "cancel", started.String())
	expect(t, r, 0)
	if want := fmt.Sprintf("cancel requested for run %s: its worker stops the running activity and ends the run\n", started); r.stdout != want {
		t.Fatalf("stdout %q, want %q", r.stdout, want)
	}
	if st, requested := status(started); st != "queued" || !requested {
		t.Fatalf("started run after cancel: %s, requested %v; want queued, requested, for its worker to end", st, requested)
	}
	expect(t, tenure(t, s, "runs", "show", started.String()), 0, "cancel    requested ")
	r = tenure(t, s, "runs", "cancel", started.String(), "--json")
	if !strings.Contains(r.stdout, `"outcome": "requested"`) {
		t.Fatalf("a repeated cancel is requested again\n%s", r)
	}

	expect(t, tenure(t, s, "runs", "cancel", done.String()), 1, fmt.Sprintf("tenure: run %s is completed: run already finished", done))
	expect(t, tenure(t, s, "runs", "cancel", unstarted.String()), 1, "is cancelled: run already finished")
	expect(t, tenure(t, s, "runs", "cancel", uuid.NewString()), 3, "not found")
	expect(t, tenure(t, s, "runs", "cancel"), 2, "give a run ID or --key KEY (see tenure runs cancel --help)")
	expect(t, tenure(t, s, "runs", "cancel", unstarted.String(), started.String()), 2, "tenure runs cancel takes 1 argument, got 2")
}

func TestCLI_ShowNamesEachStepByKindWithWhatItWaitedFor(t *testing.T) {
	f := newFixtures(t)
	s := f.schema
	parent := f.run("approval", "queued", `started_at = now() - interval '1 minute', waiting_for = 'signal:approve', run_after = 'infinity'`)
	child := f.run("ship-only", "completed", fmt.Sprintf("parent_run_id = '%s', parent_step = 3", parent))
	f.exec(`INSERT INTO {schema}.steps (run_id, step, activity, kind, status, policy, due_at, child_run_id, finished_at) VALUES
		($1, 1, 'ship', 'activity', 'completed', '{"max_attempts": 3}', NULL, NULL, now()),
		($1, 2, 'sleep', 'sleep', 'completed', '{}', now() - interval '50 seconds', NULL, now() - interval '50 seconds'),
		($1, 3, 'ship-only', 'child', 'completed', '{}', NULL, $2, now() - interval '40 seconds'),
		($1, 4, 'approve', 'signal', 'completed', '{}', now() + interval '1 hour', NULL, now() - interval '30 seconds'),
		($1, 5, 'progress', 'event', 'completed', '{}', NULL, NULL, now() - interval '20 seconds'),
		($1, 6, 'approve', 'signal', 'waiting', '{}', NULL, NULL, NULL)`, parent, child)
	f.exec(`INSERT INTO {schema}.signals (run_id, name, payload, consumed_step, consumed_at)
		VALUES ($1, 'approve', '"yes"', 4, now() - interval '30 seconds')`, parent)
	f.exec(`INSERT INTO {schema}.events (run_id, key, value, step) VALUES ($1, 'progress', '"shipped"', 5)`, parent)
	var signalID int64
	f.query(`SELECT id FROM {schema}.signals WHERE run_id = $1`, []any{parent}, &signalID)

	r := tenure(t, s, "runs", "show", parent.String())
	expect(t, r, 0,
		`waiting   signal "approve", no timeout`,
		"step 1  ship  completed\n  policy  max_attempts=3",
		"step 2  sleep  completed\n  due ", "  woke ",
		fmt.Sprintf("step 3  child ship-only  completed\n  child  %s (completed)", child),
		"step 4  signal approve  completed\n  timeout ", " (in ",
		fmt.Sprintf("  received  signal %d at ", signalID),
		"step 5  event progress  completed\n",
		"step 6  signal approve  waiting\n  timeout  none\n")
	if strings.Count(r.stdout, "policy") != 1 || strings.Count(r.stdout, "ATTEMPT") != 1 {
		t.Fatalf("only the activity step has a policy and attempts\n%s", r)
	}
	expect(t, tenure(t, s, "runs", "show", child.String()), 0, fmt.Sprintf("parent    %s step 3", parent))
	expect(t, tenure(t, s, "explain", parent.String(), "2"), 1, "is a step of kind sleep (sleep): it has no attempts and no retry policy")

	r = tenure(t, s, "runs", "show", parent.String(), "--json")
	var shown struct {
		Run struct {
			WaitingFor string `json:"waiting_for"`
		} `json:"run"`
		Steps []struct {
			Kind        record.StepKind  `json:"kind"`
			DueAt       *time.Time       `json:"due_at"`
			SignalID    int64            `json:"signal_id"`
			ChildRunID  *uuid.UUID       `json:"child_run_id"`
			ChildStatus record.RunStatus `json:"child_status"`
			PolicyText  string           `json:"policy_text"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || len(shown.Steps) != 6 || shown.Run.WaitingFor != "signal:approve" {
		t.Fatalf("runs show --json: %+v, %v\n%s", shown, err, r)
	}
	st := shown.Steps
	if st[0].Kind != record.KindActivity || st[0].PolicyText == "" || st[1].Kind != record.KindSleep || st[1].DueAt == nil ||
		st[2].ChildRunID == nil || *st[2].ChildRunID != child || st[2].ChildStatus != record.RunCompleted ||
		st[3].SignalID != signalID || st[4].Kind != record.KindEvent || st[5].SignalID != 0 || st[5].PolicyText != "" {
		t.Fatalf("runs show --json steps: %+v\n%s", st, r)
	}

	// A run asleep for an hour says so, and until when.
	asleep := f.run("approval", "queued", `started_at = now(), waiting_for = 'sleep', run_after = now() + interval '1 hour'`)
	f.exec(`INSERT INTO {schema}.steps (run_id, step, activity, kind, status, policy, due_at)
		VALUES ($1, 1, 'sleep', 'sleep', 'waiting', '{}', now() + interval '1 hour')`, asleep)
	expect(t, tenure(t, s, "runs", "show", asleep.String()), 0,
		"waiting   sleep until ", " (in ", "step 1  sleep  waiting\n  due  ")

	// A run backing off (or started with a delay) says when it is due; one
	// due now says nothing of waiting (its turn for a worker).
	backoff := f.run("approval", "queued", `started_at = now(), run_after = now() + interval '10 minutes'`)
	expect(t, tenure(t, s, "runs", "show", backoff.String()), 0, "waiting   due at ", " (in ", "(a delayed start or a backoff)")
	due := f.run("approval", "queued", `run_after = now() - interval '1 second'`)
	if r := tenure(t, s, "runs", "show", due.String()); strings.Contains(r.stdout, "waiting") {
		t.Fatalf("a run due now waits for nothing but a worker:\n%s", r)
	}
}

var approve = sdk.NewWorkflow("approve-and-ship", func(ctx context.Context, o order) (string, error) {
	if err := sdk.Sleep(ctx, time.Millisecond); err != nil {
		return "", err
	}
	by, err := sdk.Receive[string](ctx, "approve", 0)
	if err != nil {
		return "", err
	}
	if _, err := sdk.Call(ctx, shipOnly, o); err != nil {
		return "", err
	}
	return by, sdk.SetEvent(ctx, "progress", "shipped")
})

func TestCLI_ASignalFromTheCLIWakesAWaitingWorkflow(t *testing.T) {
	e := newEnv(t, approve, shipOnly)
	run, err := sdk.Start(t.Context(), e.client, approve, order{ID: 7})
	if err != nil {
		t.Fatal(err)
	}
	id := run.ID.String()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := tenure(t, e.schema, "runs", "show", id)
		if strings.Contains(r.stdout, `waiting   signal "approve", no timeout`) {
			expect(t, r, 0, "status    queued", "step 1  sleep  completed", "step 2  signal approve  waiting\n  timeout  none")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run does not wait for its signal in 20s\n%s", r)
		}
		time.Sleep(20 * time.Millisecond)
	}

	expect(t, tenure(t, e.schema, "runs", "signal", id, "approve", `"ada"`), 0, `"approve" to run `+id)
	if by, err := wait(t, run); err != nil || by != "ada" {
		t.Fatalf("run after the signal: %q, %v; want the payload sent", by, err)
	}
	r := tenure(t, e.schema, "runs", "show", id)
	expect(t, r, 0, "status    completed", "step 1  sleep  completed\n  due ", "step 2  signal approve  completed",
		"  received  signal ", "step 3  child ship-only  completed\n  child  ", "(completed)", "step 4  event progress  completed")
	expect(t, tenure(t, e.schema, "runs", "cancel", id), 1, "is completed: run already finished")
}
