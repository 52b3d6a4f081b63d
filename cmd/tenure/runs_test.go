package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// bankUp is flipped when the bank behind refund comes back.
var bankUp atomic.Bool

var refund = activities.New("refund", func(ctx context.Context, o order) (int, error) {
	if !bankUp.Load() {
		return 0, errors.New("bank unreachable")
	}
	return o.ID * 10, nil
}, policy.MaxAttempts(2), policy.Constant(5*time.Millisecond), policy.Jitter(policy.NoJitter))

var refundOrder = sdk.NewWorkflow("refund-order", func(ctx context.Context, o order) (int, error) {
	return sdk.Execute(ctx, refund, o)
})

// unserved is a workflow no worker of these tests registers: its runs stay
// as the test puts them.
var unserved = sdk.NewWorkflow("unserved", func(ctx context.Context, in struct{ Note string }) (int, error) {
	return 0, nil
})

// volatile replaces what changes from one run of a test to the next (times,
// durations since, a role name) so that the head of runs show can be
// compared whole.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`), "<time>"},
	{regexp.MustCompile(`\((?:[0-9.]+(?:ms|s|m|h))+ ago\)`), "(<ago>)"},
	{regexp.MustCompile(`by \S+ \(audit \d+\)`), "by <role> (audit <n>)"},
}

// head is the first block of runs show (the run, before its steps), with
// volatile parts replaced and the run ID named <run>.
func head(out, runID string) string {
	h, _, _ := strings.Cut(out, "\n\n")
	h = strings.ReplaceAll(h, runID, "<run>")
	for _, v := range volatile {
		h = v.re.ReplaceAllString(h, v.with)
	}
	return h + "\n"
}

// TestCLI_FindingARunByItsKey is the question of the on-call engineer: why
// did order 42 fail? The key is what they know; the run ID comes after.
func TestCLI_FindingARunByItsKey(t *testing.T) {
	bankUp.Store(false)
	e := newEnv(t, refundOrder)
	s := e.schema
	r, err := sdk.Start(t.Context(), e.client, refundOrder, order{ID: 42}, sdk.WithKey("order-42"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := sdk.Start(t.Context(), e.client, refundOrder, order{ID: 43}, sdk.WithKey("order-43"))
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []*sdk.Run[int]{r, other} {
		if _, err := wait(t, run); err == nil {
			t.Fatalf("run %s succeeded; want a failure", run.ID)
		}
	}
	id := r.ID.String()

	// A key where an ID belongs says how to look it up.
	got := tenure(t, s, "runs", "show", "order-42")
	want := `tenure: invalid run ID "order-42": want a UUID (to find a run by its key: tenure runs show --key order-42)` + "\n" +
		`Run "tenure --help" for usage.` + "\n"
	if got.code != 2 || got.stderr != want {
		t.Fatalf("runs show order-42:\n%s\nwant stderr:\n%s", got, want)
	}

	got = tenure(t, s, "runs", "show", "--key", "order-42")
	expect(t, got, 0, "step 1  refund  failed: retries_exhausted")
	want = `run       <run>
key       order-42
workflow  refund-order
status    failed
queue     default
created   <time> (<ago>)
finished  <time> (<ago>)
build     cli-test-build (first claimed by)
failure   retries_exhausted at step 1 (refund) after 2 attempts (2 errors, 0 rescues)
error     *errors.errorString: bank unreachable
input     {"ID": 42}
output    -
`
	if h := head(got.stdout, id); h != want {
		t.Fatalf("runs show --key order-42, head:\n%s\nwant:\n%s\nfull output:\n%s", h, want, got)
	}
	expect(t, tenure(t, s, "runs", "show", "--key", "order-44"), 3, `run with key "order-44": not found`)
	expect(t, tenure(t, s, "runs", "show", "--key", "order-42", id), 2, "give a run ID or --key, not both")
	expect(t, tenure(t, s, "runs", "show"), 2, "give a run ID or --key KEY")

	// runs list narrows down by key, workflow and status.
	got = tenure(t, s, "runs", "list", "--key", "order-42")
	lines := strings.Split(strings.TrimSpace(got.stdout), "\n")
	if got.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], id+"  order-42  refund-order  failed  default") ||
		!strings.HasSuffix(lines[1], "retries_exhausted at step 1 (refund)") {
		t.Fatalf("runs list --key order-42: want the header and run %s alone\n%s", id, got)
	}
	got = tenure(t, s, "runs", "list", "--workflow", "refund-order", "--status", "failed", "--json")
	var listed []struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	if err := json.Unmarshal([]byte(got.stdout), &listed); err != nil || len(listed) != 2 ||
		listed[0].Key != "order-43" || listed[1].Key != "order-42" {
		t.Fatalf("runs list --workflow --status --json: %+v, %v\n%s", listed, err, got)
	}
	expect(t, tenure(t, s, "runs", "list", "--workflow", "refund-order", "--status", "completed"), 0)
	if got := tenure(t, s, "runs", "list", "--status", "completed"); strings.Contains(got.stdout, id) {
		t.Fatalf("runs list --status completed lists failed run %s\n%s", id, got)
	}
	got = tenure(t, s, "runs", "list", "--status", "done")
	want = `tenure: --status: unknown status "done": want one of queued, running, completed, failed, cancelled` + "\n" +
		`Run "tenure --help" for usage.` + "\n"
	if got.code != 2 || got.stderr != want {
		t.Fatalf("runs list --status done:\n%s\nwant stderr:\n%s", got, want)
	}
}

// TestCLI_RunsShowTellsTheRequeuesAndTheOutput: once a failed run is
// requeued and completes, runs show says who requeued it, when, with what
// note, and what the run returned.
func TestCLI_RunsShowTellsTheRequeuesAndTheOutput(t *testing.T) {
	bankUp.Store(false)
	e := newEnv(t, refundOrder)
	s := e.schema
	r, err := sdk.Start(t.Context(), e.client, refundOrder, order{ID: 7}, sdk.WithKey("refund-7"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(t, r); err == nil {
		t.Fatal("run succeeded; want a failure")
	}
	id := r.ID.String()
	expect(t, tenure(t, s, "failures", "requeue", "--workflow", "refund-order", "--dry-run"), 0,
		"\n1 run would be requeued (dry run: nothing changed)\n")
	bankUp.Store(true)
	expect(t, tenure(t, s, "failures", "requeue", id, "--note", "INC-7: bank back"), 0, "requeued "+id+"\n")
	if out, err := wait(t, r); err != nil || out != 70 {
		t.Fatalf("requeued run: %d, %v", out, err)
	}

	got := tenure(t, s, "runs", "show", "--key", "refund-7")
	want := `run       <run>
key       refund-7
workflow  refund-order
status    completed
queue     default
created   <time> (<ago>)
finished  <time> (<ago>)
requeued  1 time
          <time> (<ago>) by <role> (audit <n>): INC-7: bank back
build     cli-test-build (first claimed by)
input     {"ID": 7}
output    70
`
	if h := head(got.stdout, id); h != want {
		t.Fatalf("runs show of a requeued run, head:\n%s\nwant:\n%s\nfull output:\n%s", h, want, got)
	}
	expect(t, got, 0, "attempts up to 2 were made before a requeue and no longer count (marked *)", "  1*", "  2*")
	expect(t, tenure(t, s, "runs", "list", "--key", "refund-7"), 0, "completed  default", "requeued 1 time\n")

	got = tenure(t, s, "runs", "show", id, "--json")
	var shown struct {
		Run struct {
			Key    string          `json:"key"`
			Input  json.RawMessage `json:"input"`
			Output json.RawMessage `json:"output"`
		} `json:"run"`
		Requeues []struct {
			Actor string `json:"actor"`
			Note  string `json:"note"`
		} `json:"requeues"`
	}
	if err := json.Unmarshal([]byte(got.stdout), &shown); err != nil || shown.Run.Key != "refund-7" ||
		compact(shown.Run.Input) != `{"ID":7}` || compact(shown.Run.Output) != "70" ||
		len(shown.Requeues) != 1 || shown.Requeues[0].Note != "INC-7: bank back" || shown.Requeues[0].Actor == "" {
		t.Fatalf("runs show --json: %+v, %v\n%s", shown, err, got)
	}
}

// TestCLI_RunsShowCutsLongPayloadsAndHidesThemOnRequest: a table shows the
// first 2 KB of a payload, cut between characters, and says so; --json has
// it whole; --no-payloads leaves it out of both.
func TestCLI_RunsShowCutsLongPayloadsAndHidesThemOnRequest(t *testing.T) {
	e := newEnv(t, refundOrder) // a worker that does not serve unserved
	s := e.schema
	note := "x" + strings.Repeat("é", 1500) // 3001 bytes: byte 2048 of the JSON is inside an é
	r, err := sdk.Start(t.Context(), e.client, unserved, struct{ Note string }{note}, sdk.WithKey("big"))
	if err != nil {
		t.Fatal(err)
	}
	got := tenure(t, s, "runs", "show", "--key", "big")
	expect(t, got, 0)
	var input string
	for _, l := range strings.Split(got.stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "input     "); ok {
			input = v
		}
	}
	// {"Note": "x + 1018 é = 2047 bytes, then the note.
	want := `{"Note": "x` + strings.Repeat("é", 1018) + "… (first 2047 of 3013 bytes; --json prints it whole)"
	if input != want || !utf8.ValidString(input) {
		t.Fatalf("input row:\n%q\nwant:\n%q\n%s", input, want, got)
	}

	var shown struct {
		Run struct {
			Input *struct{ Note string } `json:"input"`
		} `json:"run"`
	}
	got = tenure(t, s, "runs", "show", r.ID.String(), "--json")
	if err := json.Unmarshal([]byte(got.stdout), &shown); err != nil || shown.Run.Input == nil || shown.Run.Input.Note != note {
		t.Fatalf("runs show --json does not have the input whole: %v\n%s", err, got)
	}

	got = tenure(t, s, "runs", "show", "--key", "big", "--no-payloads")
	if got.code != 0 || strings.Contains(got.stdout, "input") || strings.Contains(got.stdout, "output") || strings.Contains(got.stdout, "é") {
		t.Fatalf("runs show --no-payloads prints a payload\n%s", got)
	}
	got = tenure(t, s, "runs", "show", "--key", "big", "--no-payloads", "--json")
	if got.code != 0 || strings.Contains(got.stdout, `"input"`) || strings.Contains(got.stdout, "é") {
		t.Fatalf("runs show --no-payloads --json prints a payload\n%s", got)
	}
}

// TestCLI_LeaseTimeReadsAsLeftOrAgo: a running run's lease is "2s left",
// or, once it expired, "expired 2s ago", never a negative time left.
func TestCLI_LeaseTimeReadsAsLeftOrAgo(t *testing.T) {
	e := newEnv(t, refundOrder) // a worker that does not serve unserved
	s := e.schema
	for key, lease := range map[string]string{"expired": "-2 seconds", "live": "90 seconds"} {
		r, err := sdk.Start(t.Context(), e.client, unserved, struct{ Note string }{}, sdk.WithKey(key))
		if err != nil {
			t.Fatal(err)
		}
		// A worker that claimed the run and vanished (or is alive), as the
		// claim would leave it.
		if _, err := e.pool.Exec(t.Context(), `UPDATE `+s+`.runs SET status = 'running', claimant = 'gone-worker',
			epoch = 1, started_at = now(), lease_expires_at = now() + $2::interval WHERE id = $1`, r.ID, lease); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, tenure(t, s, "runs", "list", "--key", "expired"), 0, "  held by gone-worker, lease expired 2s ago\n")
	expect(t, tenure(t, s, "runs", "list", "--key", "live"), 0, "  held by gone-worker, lease 1m30s left\n")
}

// compact is raw JSON without its indentation.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "(not JSON: " + err.Error() + ")"
	}
	return b.String()
}
