package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/sdk"
)

var (
	gateway  = flow.New("gateway", flow.Concurrency(20), flow.Rate(50, time.Second, 10))
	callGate = activities.New("call-gateway", func(ctx context.Context, o order) (int, error) { return o.ID, nil }).
			Calls(gateway, nil)
	payViaGateway = sdk.NewWorkflow("pay-via-gateway", func(ctx context.Context, o order) (int, error) {
		return sdk.Execute(ctx, callGate, o)
	})
)

// newGatewayEnv is an env whose worker has called the gateway once: a
// downstream is listed from its first call.
func newGatewayEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, payViaGateway)
	r, err := sdk.Start(t.Context(), e.client, payViaGateway, order{ID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(t, r); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestCLI_LimitsSetByHandAndReset: the listing says who set the limits, a
// change and a reset print the limits in force and are audited with the
// note, and the declaration applies again after the reset.
func TestCLI_LimitsSetByHandAndReset(t *testing.T) {
	e := newGatewayEnv(t)
	s := e.schema
	declared := "concurrency 20, rate 50/1s burst 10, retries 20%+10/s"

	r := tenure(t, s, "limits")
	expect(t, r, 0, "DOWNSTREAM", "LIMITS", "SET BY", "IN USE", "WAITING", "BREAKER")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 ||
		strings.Join(strings.Fields(lines[1]), " ") != "gateway "+declared+" code 0 0 closed" {
		t.Fatalf("tenure limits:\n%s", r)
	}

	r = tenure(t, s, "limits", "set", "gateway", "--concurrency", "5", "--rate", "20/s", "--burst", "4", "--retry-ratio", "10%", "--note", "INC-7: the gateway throttles us")
	want := "limits of gateway: concurrency 5, rate 20/1s burst 4, retries 10%+10/s\n" +
		"set by hand: the limits its code declares no longer apply until tenure limits reset\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("limits set:\n%s\nwant stdout:\n%s", r, want)
	}
	r = tenure(t, s, "limits", "set", "gateway", "--rate", "none", "--retry-per-second", "none", "--breaker-ratio", "0.5", "--breaker-open-for", "30s", "--json")
	expect(t, r, 0)
	var set struct {
		Downstream string         `json:"downstream"`
		Limits     map[string]any `json:"limits"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &set); err != nil || set.Downstream != "gateway" ||
		fmt.Sprint(set.Limits) != "map[breaker_error_ratio:0.5 breaker_min_calls:10 breaker_open_ms:30000 breaker_window_ms:10000 concurrency:5]" {
		t.Fatalf("limits set --json: %+v, %v\n%s", set, err, r)
	}
	expect(t, tenure(t, s, "limits"), 0, "concurrency 5, breaker 50% of 10 in 10s, open 30s", "ago")

	r = tenure(t, s, "limits", "show", "gateway")
	expect(t, r, 0, "limits        concurrency 5, breaker 50% of 10 in 10s, open 30s",
		"declarations no longer apply until tenure limits reset", "declared      "+declared+", by cli-test-worker",
		"in use        0 slots, 1 key called", "waiting       0 steps", "admitted      1 (0 retries)",
		"denied        0 (concurrency 0, rate 0, breaker 0, retry budget 0)", "calls         1 ended, 0 errors",
		"the breaker never changed")

	r = tenure(t, s, "limits", "reset", "gateway", "--note", "INC-7 closed")
	if want := "limits of gateway: " + declared + "\nas its code declares them\n"; r.code != 0 || r.stdout != want {
		t.Fatalf("limits reset:\n%s\nwant stdout:\n%s", r, want)
	}
	expect(t, tenure(t, s, "limits", "show", "gateway"), 0, "as declared")

	r = tenure(t, s, "audit", "--json")
	expect(t, r, 0)
	var audit []struct {
		Action string         `json:"action"`
		Actor  string         `json:"actor"`
		Filter map[string]any `json:"filter"`
		Note   string         `json:"note"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &audit); err != nil || len(audit) != 4 {
		t.Fatalf("audit after the changes: %+v, %v", audit, err)
	}
	for i, w := range []struct{ by, note string }{
		{"reset to the declaration", "INC-7 closed"}, {"person", ""}, {"person", "INC-7: the gateway throttles us"}, {"declaration by cli-test-worker", ""},
	} {
		if a := audit[i]; a.Action != "limits" || a.Filter["by"] != w.by || a.Note != w.note || a.Filter["downstream"] != "gateway" || a.Actor == "" {
			t.Errorf("audit row %d: %+v, want action limits by %q with note %q", i, a, w.by, w.note)
		}
	}
}

// TestCLI_BreakerOpenedByHandHoldsTheRunUntilClosed: a run started while the
// breaker is open by hand waits, and completes once it is closed; limits
// show tells it all, with the history.
func TestCLI_BreakerOpenedByHandHoldsTheRunUntilClosed(t *testing.T) {
	e := newGatewayEnv(t)
	s := e.schema

	r := tenure(t, s, "breaker", "open", "gateway", "--note", "INC-9: the gateway double-charges")
	if want := "opened the breaker of gateway by hand: no call of it starts until tenure breaker close gateway\n"; r.code != 0 || r.stdout != want {
		t.Fatalf("breaker open:\n%s\nwant stdout:\n%s", r, want)
	}
	run, err := sdk.Start(t.Context(), e.client, payViaGateway, order{ID: 2})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(tenure(t, s, "limits").stdout, "open by hand") || !strings.Contains(tenure(t, s, "limits", "show", "gateway").stdout, "waiting       1 step") {
		if time.Now().After(deadline) {
			t.Fatalf("the run does not wait on the open breaker:\n%s", tenure(t, s, "limits", "show", "gateway"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	expect(t, tenure(t, s, "runs", "show", run.ID.String()), 0, "waiting   the limits of downstream gateway, until a release (tenure limits show gateway)")
	expect(t, tenure(t, s, "limits", "show", "gateway"), 0, "breaker       open by hand since", "denied        1 (concurrency 0, rate 0, breaker 1, retry budget 0)")

	r = tenure(t, s, "breaker", "close", "gateway", "--note", "INC-9: fixed", "--json")
	var closed struct{ Downstream, Breaker string }
	if err := json.Unmarshal([]byte(r.stdout), &closed); r.code != 0 || err != nil || closed.Downstream != "gateway" || closed.Breaker != "closed" {
		t.Fatalf("breaker close --json:\n%s", r)
	}
	if out, err := wait(t, run); err != nil || out != 2 {
		t.Fatalf("the run held by the breaker: %v, %v", out, err)
	}
	r = tenure(t, s, "limits", "show", "gateway")
	expect(t, r, 0, "breaker       closed since", "breaker history, newest first", "AT", "FROM", "TO", "BY", "ACTOR", "WHY",
		"INC-9: fixed", "INC-9: the gateway double-charges")
	if i, j := strings.Index(r.stdout, "INC-9: fixed"), strings.Index(r.stdout, "INC-9: the gateway"); i > j {
		t.Fatalf("the history is not newest first:\n%s", r)
	}
	r = tenure(t, s, "limits", "show", "gateway", "--limit", "1", "--json")
	var shown struct {
		Downstream struct {
			Name    string `json:"name"`
			Breaker string `json:"breaker"`
		} `json:"downstream"`
		History []struct {
			From string `json:"from"`
			To   string `json:"to"`
			By   string `json:"by"`
			Why  string `json:"why"`
		} `json:"breaker_history"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || shown.Downstream.Name != "gateway" || len(shown.History) != 1 ||
		shown.History[0].From != "open" || shown.History[0].To != "closed" || shown.History[0].By != "person" || shown.History[0].Why != "INC-9: fixed" {
		t.Fatalf("limits show --json: %+v, %v\n%s", shown, err, r)
	}
}

// TestCLI_LimitsMistakesAreUsageErrorsAndUnknownDownstreamsNotFound: a value
// that does not parse, or limits that make no sense, exit 2 naming the
// flag or the limit and change nothing; a downstream with no row exits 3.
func TestCLI_LimitsMistakesAreUsageErrorsAndUnknownDownstreamsNotFound(t *testing.T) {
	e := newGatewayEnv(t)
	s := e.schema
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"limits", "set", "gateway"}, "give the limits to change: --concurrency, --rate, --burst, --retry-ratio, --retry-per-second, --breaker-ratio, --breaker-min-calls, --breaker-window or --breaker-open-for (see tenure limits set --help)"},
		{[]string{"limits", "set", "gateway", "--concurrency", "many"}, `--concurrency "many": want a whole number, or none to remove the limit`},
		{[]string{"limits", "set", "gateway", "--burst", "none"}, `--burst "none": want a whole number`},
		{[]string{"limits", "set", "gateway", "--rate", "5/fortnight"}, `--rate "5/fortnight": want N/INTERVAL (50/1s, 600/1m, 10/s), N alone, or none to remove the rate limit`},
		{[]string{"limits", "set", "gateway", "--retry-per-second", "10%"}, `--retry-per-second "10%": want a number such as 10, or none to remove the limit`},
		{[]string{"limits", "set", "gateway", "--breaker-window", "soon"}, `--breaker-window "soon": want a duration such as 10s or 1m`},
		{[]string{"limits", "set", "gateway", "--concurrency", "0"}, `set limits of downstream "gateway": concurrency = 0: at least 1, or remove the limit: invalid downstream`},
		{[]string{"limits", "set", "gateway", "--breaker-ratio", "150%"}, `set limits of downstream "gateway": breaker error ratio (above 0, at most 1) = 1.5: invalid downstream`},
		{[]string{"limits", "set", "gateway", "--breaker-min-calls", "5"}, `set limits of downstream "gateway": breaker settings need an error ratio: the downstream has no breaker: invalid downstream`},
		{[]string{"limits", "set", "gateway", "--rate", "none", "--burst", "3"}, `set limits of downstream "gateway": the rate is both set and removed: invalid downstream`},
		{[]string{"limits", "show"}, "tenure limits show takes 1 argument, got 0 (see tenure limits show --help)"},
		{[]string{"limits", "nope"}, `unknown command "nope" for "tenure limits"`},
		{[]string{"breaker", "open"}, "tenure breaker open takes 1 argument, got 0 (see tenure breaker open --help)"},
	} {
		got := tenure(t, s, c.args...)
		if want := "tenure: " + c.stderr + "\n" + usage; got.code != 2 || got.stderr != want || got.stdout != "" {
			t.Errorf("tenure %s:\n%s\nwant exit 2 and stderr:\n%s", strings.Join(c.args, " "), got, want)
		}
	}
	expect(t, tenure(t, s, "limits", "show", "gateway"), 0, "as declared")

	const hint = "(tenure limits lists the downstreams; one is listed once a worker has called it)"
	for _, args := range [][]string{
		{"limits", "show", "nope"}, {"limits", "set", "nope", "--concurrency", "1"}, {"limits", "reset", "nope"},
		{"breaker", "open", "nope"}, {"breaker", "close", "nope"},
	} {
		expect(t, tenure(t, s, args...), exitNotFound, `"nope": no such downstream `+hint)
	}
}

// TestCLI_LimitsListsNothingWithoutDownstreams: no table header on stdout,
// [] with --json.
func TestCLI_LimitsListsNothingWithoutDownstreams(t *testing.T) {
	e := newEnv(t, shipOnly)
	if r := tenure(t, e.schema, "limits"); r.code != 0 || r.stdout != "" || r.stderr != "no downstreams match\n" {
		t.Fatalf("tenure limits without downstreams:\n%s", r)
	}
	if r := tenure(t, e.schema, "limits", "--json"); r.code != 0 || r.stdout != "[]\n" {
		t.Fatalf("tenure limits --json without downstreams:\n%s", r)
	}
}
