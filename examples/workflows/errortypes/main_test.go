package main

import (
	"bytes"
	"fmt"
	"os"
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
func TestErrorTypes_RunsQuietlyAsGoRunRunsIt(t *testing.T) {
	t.Parallel()
	out := exampledb.RunProgram(t, 3*time.Minute)
	for _, want := range []string{
		"alice: synced after 5 attempts",
		"dave: synced after 3 attempts",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the program's output lacks %q:\n%s", want, out)
		}
	}
}

// The program as go run runs it, in a schema of the kit's: it prints each
// outcome, and how to look at it.
func TestErrorTypes_PrintsEachOutcome(t *testing.T) {
	t.Parallel()
	env := tenuretest.New(t) // a schema of the test's own (run recreates it), dropped after the test
	var out bytes.Buffer
	if _, err := run(t.Context(), &out, tenuretest.URL(t), env.Schema); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"alice: synced after 5 attempts", "bob: failed: non_retryable after 1 attempts",
		"carol: failed: retries_exhausted after 3 attempts", "dave: synced after 3 attempts",
		"explain",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// Each customer's script on the fake CRM meets another rule of the
// activity's policy; each case runs in an env of its own.
func TestErrorTypes_EachErrorGetsItsOwnPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		customer Customer
		reason   sdk.Reason    // "" when the customer is synced
		attempts int           // attempts the rule allowed or needed
		delay    time.Duration // before the second attempt
		source   string        // of that delay
	}{
		{Customer{"alice", "alice@example.com"}, "", 5, 50 * time.Millisecond, "retry-after"},                    // 4 rate limits: the rule's 8 attempts, not the default 3
		{Customer{Name: "bob"}, sdk.ReasonNonRetryable, 1, 0, ""},                                                // no e-mail, permanent: one attempt
		{Customer{"carol", "carol@example.com"}, sdk.ReasonRetriesExhausted, 3, 50 * time.Millisecond, "policy"}, // the default policy
		{Customer{"dave", "dave@example.com"}, "", 3, 100 * time.Millisecond, "policy"},                          // maintenance rule: constant 100ms
	} {
		t.Run(tc.customer.Name, func(t *testing.T) {
			t.Parallel()
			wf := newSyncCustomer(newCRM())
			env := tenuretest.New(t, tenuretest.Workflows(wf))
			run := tenuretest.Start(env, wf, tc.customer)
			if tc.reason == "" {
				if out, err := tenuretest.Result(env, run); err != nil || out != "synced "+tc.customer.Name {
					t.Fatalf("Result = %q, %v", out, err)
				}
			} else if f := env.RequireFailed(run.ID, tc.reason); f.Attempts != tc.attempts {
				t.Errorf("failure after %d attempts, want %d: %+v", f.Attempts, tc.attempts, f)
			}
			h := env.History(run.ID)
			if len(h) != tc.attempts {
				t.Fatalf("%d attempts, want %d: %v", len(h), tc.attempts, env.Timeline(run.ID))
			}
			if tc.source != "" && (h[0].Delay == nil || *h[0].Delay != tc.delay || h[0].DelaySource != tc.source) {
				t.Errorf("first delay %v from %q, want %s from %q", h[0].Delay, h[0].DelaySource, tc.delay, tc.source)
			}
		})
	}
}
