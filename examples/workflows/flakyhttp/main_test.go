package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/tenuretest"
)

func TestMain(m *testing.M) {
	if os.Getenv(exampledb.ProgramEnv) != "" { // exampledb.RunProgram runs the program
		main()
		os.Exit(0)
	}
	code := tenuretest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The program as go run runs it without DATABASE_URL: on a private cluster
// of its own, saying so on its first line, with nothing on stderr (no
// warning that no worker serves a run it starts).
func TestFlakyHTTP_RunsQuietlyAsGoRunRunsIt(t *testing.T) {
	t.Parallel()
	out := exampledb.RunProgram(t, 3*time.Minute)
	for _, want := range []string{
		"1s (retry-after)",
		"quotes API: 404 no such product",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the program's output lacks %q:\n%s", want, out)
		}
	}
}

// newQuotes runs the example's workflow against a flaky API of the test's own.
func newQuotes(t *testing.T) (*tenuretest.Env, *sdk.Workflow[string, Quote]) {
	t.Helper()
	api := newAPI()
	t.Cleanup(api.Close) // after the env's worker stopped
	wf := newFetchQuote(api.URL)
	return tenuretest.New(t, tenuretest.Workflows(wf)), wf
}

// The program as go run runs it, in a schema of the kit's: it prints the
// delays with their sources, and how to look at them.
func TestFlakyHTTP_PrintsTheDelaysAndTheirSources(t *testing.T) {
	t.Parallel()
	env := tenuretest.New(t) // a schema of the test's own (run recreates it), dropped after the test
	var out bytes.Buffer
	if _, err := run(t.Context(), &out, tenuretest.URL(t), env.Schema); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"1s (retry-after)", "1.5s (retry-after)", "reason=non_retryable", "attempt_timeline"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFlakyHTTP_WaitsWhatTheServerAsksAndRecordsIt(t *testing.T) {
	t.Parallel()
	env, wf := newQuotes(t)
	run := tenuretest.Start(env, wf, "espresso-machine")
	if q, err := tenuretest.Result(env, run); err != nil || q.PriceCents != 24900 {
		t.Fatalf("Result = %+v, %v", q, err)
	}
	want := []string{"1.1 fetch-quote failed", "1.2 fetch-quote failed", "1.3 fetch-quote succeeded"}
	if got := env.Timeline(run.ID); !slices.Equal(got, want) {
		t.Fatalf("attempts %v, want %v", got, want)
	}
	h := env.History(run.ID)
	// Retry-After: 1, then Retry-After: 120 clamped by MaxRetryAfter(1.5s).
	for i, want := range []time.Duration{time.Second, 1500 * time.Millisecond} {
		if h[i].Delay == nil || *h[i].Delay != want || h[i].DelaySource != "retry-after" {
			t.Errorf("attempt %d: delay %v (%s), want %s from retry-after", i+1, h[i].Delay, h[i].DelaySource, want)
		}
	}
	if waited := h[1].StartedAt.Sub(h[0].StartedAt); waited < time.Second {
		t.Errorf("attempt 2 started %s after attempt 1: the Retry-After was not honoured", waited)
	}
}

func TestFlakyHTTP_A404FailsAtOnce(t *testing.T) {
	t.Parallel()
	env, wf := newQuotes(t)
	run := tenuretest.Start(env, wf, "flux-capacitor")
	f := env.RequireFailed(run.ID, sdk.ReasonNonRetryable)
	if f.Activity != "fetch-quote" || f.Attempts != 1 || !strings.Contains(f.ErrorMessage, "404") {
		t.Errorf("failure %+v, want fetch-quote's 404 after one attempt", f)
	}
}
