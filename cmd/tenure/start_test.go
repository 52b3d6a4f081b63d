package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

var greet = activities.New("greet", func(ctx context.Context, name string) (string, error) {
	return "Hello, " + name, nil
})

var greeting = sdk.NewWorkflow("greeting", func(ctx context.Context, name string) (string, error) {
	s, err := sdk.Execute(ctx, greet, name)
	if err != nil {
		return "", err
	}
	return s, sdk.Sleep(ctx, time.Millisecond)
})

var refuse = activities.New("refuse", func(ctx context.Context, name string) (string, error) {
	return "", policy.Permanent(errors.New("no such customer: " + name))
})

var refusal = sdk.NewWorkflow("refusal", func(ctx context.Context, name string) (string, error) {
	return sdk.Execute(ctx, refuse, name)
})

// startJSON is what runs start --json prints.
type startJSON struct {
	RunID   uuid.UUID `json:"run_id"`
	Queue   string    `json:"queue"`
	Key     string    `json:"key"`
	Created bool      `json:"created"`
}

func startRun(t *testing.T, schema string, args ...string) startJSON {
	t.Helper()
	r := tenure(t, schema, append([]string{"runs", "start", "--json"}, args...)...)
	var out startJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 || out.RunID == uuid.Nil {
		t.Fatalf("runs start %v: %+v, %v\n%s", args, out, err, r)
	}
	return out
}

// TestCLI_StartARunByNameAndWaitForItsResult is what temporal workflow
// start and result do: a run started from the CLI without the workflow's Go
// code, its steps followed as they end, its output on stdout for a script,
// its failure as exit status 5.
func TestCLI_StartARunByNameAndWaitForItsResult(t *testing.T) {
	e := newEnv(t, greeting, refusal)
	s := e.schema

	r := tenure(t, s, "runs", "start", "greeting", `"Ada"`, "--key", "greet-ada")
	expect(t, r, 0, `started run `, ` of workflow "greeting" on queue "default"`)
	if r.stderr != "" {
		t.Fatalf("a run a live worker serves starts without a warning\n%s", r)
	}
	r = tenure(t, s, "runs", "result", "--key", "greet-ada", "--follow", "--timeout", "20s")
	if r.code != 0 || r.stdout != `"Hello, Ada"`+"\n" {
		t.Fatalf("runs result: want the output alone on stdout\n%s", r)
	}
	if !strings.Contains(r.stderr, "step 1  greet  completed  (1 attempt)\n") || !strings.Contains(r.stderr, "step 2  sleep  completed\n") ||
		strings.Count(r.stderr, "step ") != 2 {
		t.Fatalf("runs result --follow: want each step once on stderr, as it ends\n%s", r)
	}
	// The same key and input: the run that holds it; another input: refused.
	expect(t, tenure(t, s, "runs", "start", "greeting", `"Ada"`, "--key", "greet-ada"), 0, `holds key "greet-ada" already, with the same input: nothing started`)
	expect(t, tenure(t, s, "runs", "start", "greeting", `"Bob"`, "--key", "greet-ada"), 1, "started with another input")
	expect(t, tenure(t, s, "runs", "start", "refusal", `"Ada"`, "--key", "greet-ada"), 1, `already names run`, `of workflow "greeting"`)

	// A failure: on stderr with its reason and error, exit 5; --json has it too.
	bad := startRun(t, s, "refusal", `"Bob"`)
	r = tenure(t, s, "runs", "result", bad.RunID.String(), "--follow")
	expect(t, r, exitRunFailed, fmt.Sprintf("tenure: run %s failed: non_retryable at step 1 (refuse) after 1 attempt: ", bad.RunID),
		"no such customer: Bob", "step 1  refuse  failed: non_retryable  (1 attempt): ")
	if r.stdout != "" {
		t.Fatalf("a failed run prints nothing on stdout\n%s", r)
	}
	r = tenure(t, s, "runs", "result", bad.RunID.String(), "--json")
	var res struct {
		Status  record.RunStatus `json:"status"`
		Output  any              `json:"output"`
		Failure *struct {
			Reason policy.Reason `json:"reason"`
			Step   int           `json:"step"`
		} `json:"failure"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != exitRunFailed || res.Status != record.RunFailed ||
		res.Output != nil || res.Failure == nil || res.Failure.Reason != policy.NonRetryable || res.Failure.Step != 1 {
		t.Fatalf("runs result --json of a failed run: %+v, %v\n%s", res, err, r)
	}

	// Nobody serves it: a warning, and a wait that gives up.
	lonely := tenure(t, s, "runs", "start", "nobody-serves", `{"n": 1}`, "--queue", "night")
	expect(t, lonely, 0, `warning: no live worker serves workflow "nobody-serves" on queue "night": the run waits until one starts`)
	if strings.Contains(lonely.stdout, "warning") {
		t.Fatalf("the warning belongs on stderr\n%s", lonely)
	}
	id := strings.Fields(lonely.stdout)[2]
	start := time.Now()
	expect(t, tenure(t, s, "runs", "result", id, "--timeout", "300ms"), 1, "run "+id+" has not ended after 300ms: it is queued")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("runs result --timeout 300ms took %s", d)
	}

	// A delayed run waits for its time.
	later := startRun(t, s, "greeting", `"Eve"`, "--delay", "1h", "--priority", "3")
	var due bool
	var priority int
	if err := e.pool.QueryRow(t.Context(), `SELECT run_after > now() + interval '59 minutes', priority FROM `+s+`.runs WHERE id = $1`,
		later.RunID).Scan(&due, &priority); err != nil || !due || priority != 3 {
		t.Fatalf("runs start --delay 1h --priority 3: due in an hour %v, priority %d, %v", due, priority, err)
	}

	// runs count, with the filters of runs list.
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "4\n"},
		{[]string{"--workflow", "greeting"}, "2\n"},
		{[]string{"--status", "queued"}, "2\n"},
		{[]string{"--status", "failed", "--workflow", "refusal"}, "1\n"},
		{[]string{"--queue", "night"}, "1\n"},
		{[]string{"--key", "greet-ada"}, "1\n"},
		{[]string{"--workflow", "none"}, "0\n"},
	} {
		r := tenure(t, s, append([]string{"runs", "count"}, c.args...)...)
		if r.code != 0 || r.stdout != c.want {
			t.Errorf("runs count %v: %q, want %q\n%s", c.args, r.stdout, c.want, r)
		}
	}
	if r := tenure(t, s, "runs", "count", "--status", "failed", "--json"); r.code != 0 || compact([]byte(r.stdout)) != `{"runs":1}` {
		t.Fatalf("runs count --json\n%s", r)
	}

	// Delete: finished runs only.
	expect(t, tenure(t, s, "runs", "delete", later.RunID.String()), 1,
		fmt.Sprintf("tenure: run %s is queued: run has not finished (cancel it first, or wait for its end)", later.RunID))
	expect(t, tenure(t, s, "runs", "delete", bad.RunID.String(), "--note", "GDPR-1"), 0,
		fmt.Sprintf("deleted run %s with its history (1 failure row)", bad.RunID))
	expect(t, tenure(t, s, "runs", "result", bad.RunID.String()), 3, "not found")
	expect(t, tenure(t, s, "failures", "list"), 0, "no failures match")
	expect(t, tenure(t, s, "audit"), 0, "delete", "GDPR-1", `"workflow":"refusal"`)
	expect(t, tenure(t, s, "runs", "delete", bad.RunID.String()), 3, "not found")
}

// TestCLI_StartChecksItsArgumentsFirst: what is not JSON, an empty name and
// a bad delay are usage errors, and nothing is started.
func TestCLI_StartChecksItsArgumentsFirst(t *testing.T) {
	f := newFixtures(t)
	s := f.schema
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"greeting", "Ada"}, `input "Ada" is not JSON`},
		{[]string{"greeting", `{"n":`}, "unexpected end of JSON input"},
		{[]string{""}, "empty workflow name"},
		{[]string{"greeting", "--queue", ""}, "--queue: empty queue name"},
		{[]string{"greeting", "--key", ""}, "--key: empty key"},
		{[]string{"greeting", "--delay", "soon"}, "--delay: invalid age"},
		{[]string{"greeting", "--fair-key", ""}, "--fair-key: empty fairness key"},
		{[]string{"greeting", "--fair-weight", "3"}, "--fair-weight needs --fair-key"},
		{[]string{"greeting", "--fair-key", "t", "--fair-weight", "0"}, "--fair-weight: 0, want 1 to 1000000"},
		{[]string{"greeting", "1", "2"}, "takes 1 to 2 arguments, got 3"},
		{nil, "takes 1 to 2 arguments, got 0"},
	} {
		r := tenure(t, s, append([]string{"runs", "start"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("runs start %q:\n%s\nwant exit 2 and %q", c.args, r, c.want)
		}
	}
	expect(t, tenure(t, s, "runs", "result", uuid.NewString(), "--timeout", "0s"), 2, "--timeout: want a positive duration")
	var n int
	f.query(`SELECT count(*) FROM {schema}.runs`, nil, &n)
	if n != 0 {
		t.Fatalf("%d runs after the refused starts", n)
	}
	// Without input, JSON null.
	r := tenure(t, s, "runs", "start", "greeting")
	expect(t, r, 0, "started run")
	var input string
	f.query(`SELECT input::text FROM {schema}.runs`, nil, &input)
	if input != "null" {
		t.Fatalf("input of a run started without one: %s, want null", input)
	}
	// With a fairness key (weight 1 unless given), as sdk.WithFairness
	// makes one: a fair run of its queue.
	for _, c := range []struct {
		args   []string
		key    string
		stride int64
	}{
		{[]string{"--fair-key", "tenant-7", "--fair-weight", "4"}, "tenant-7", 250_000},
		{[]string{"--fair-key", "tenant-8"}, "tenant-8", 1_000_000},
	} {
		out := startRun(t, s, append([]string{"greeting", `"Ada"`}, c.args...)...)
		// A key's first run on a queue whose clock is 0 is due at its
		// stride, 1,000,000 / its weight.
		var key string
		var vt int64
		f.query(`SELECT coalesce(fair_key, ''), coalesce(fair_vt, 0) FROM {schema}.runs WHERE id = $1`, []any{out.RunID}, &key, &vt)
		if key != c.key || vt != c.stride {
			t.Errorf("runs start %v: fair key %q, virtual time %d; want %q, %d", c.args, key, vt, c.key, c.stride)
		}
	}
}
