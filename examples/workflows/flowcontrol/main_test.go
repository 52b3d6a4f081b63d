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

// what the program prints whatever the timing: every line but the first
// (the database) and the SQL to run, which names the schema.
const printed = `
== 1. Twelve charges at once: at most 2 at a time and one start per 200 ms, per account ==
acct-a: 4 charged; at once: never more than 2; starts: never closer than 200ms
acct-b: 4 charged; at once: never more than 2; starts: never closer than 200ms
acct-c: 4 charged; at once: never more than 2; starts: never closer than 200ms
12 charges, 12 attempts: a wait for a limit is not an attempt
charges that waited for the rate: some (step_throttling says how long)

== 2. The provider goes down: the breaker opens, one probe, then it closes ==
the provider answers 503: the breaker opened; the retries wait, charged nothing
the provider is back: 6 of 6 charged, none failed
breaker: closed>open, open>half_open, half_open>closed

== 3. A person lowers a limit in SQL, audited, then gives it back to the code ==
set_downstream:   concurrency 1, rate 5/1s burst 1, retries 20%+10/s, breaker 50% of 4 in 2s, open 1s
reset_downstream: concurrency 2, rate 5/1s burst 1, retries 20%+10/s, breaker 50% of 4 in 2s, open 1s
audit_log (action limits):
  declaration by the worker
  person (INC-42: the provider asks us to slow down)
  reset to the declaration (INC-42 closed)
`

// The program as go run runs it without DATABASE_URL: on a private cluster
// of its own, saying so on its first line, with nothing on stderr, and
// printing the same result every time.
func TestFlowControl_RunsQuietlyAsGoRunRunsIt(t *testing.T) {
	t.Parallel()
	out := exampledb.RunProgram(t, 3*time.Minute)
	if !strings.Contains(out, printed) {
		t.Errorf("the program's output differs from\n%s\ngot:\n%s", printed, out)
	}
}

// The program's run, in a schema of the kit's: every limit held, the
// breaker went through its states once, and a person's change was audited
// and undone.
func TestFlowControl_KeepsEveryLimitAndTheBreakerCloses(t *testing.T) {
	t.Parallel()
	env := tenuretest.New(t) // a schema of the test's own (run recreates it), dropped after the test
	var out bytes.Buffer
	o, err := run(t.Context(), &out, tenuretest.URL(t), env.Schema)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if len(o.accounts) != 3 {
		t.Fatalf("accounts %+v", o.accounts)
	}
	for _, a := range o.accounts {
		if a.charged != 4 || a.most < 1 || a.most > 2 || a.minGap < 200*time.Millisecond {
			t.Errorf("%s: %d charged, %d at once, starts %v apart; want 4, at most 2, at least 200ms", a.name, a.charged, a.most, a.minGap)
		}
	}
	if o.attempts != 12 || o.rateWaits == 0 {
		t.Errorf("phase 1: %d attempts, %d steps waited for the rate; want 12 attempts and some waits", o.attempts, o.rateWaits)
	}
	if want := []string{"closed>open", "open>half_open", "half_open>closed"}; !slices.Equal(o.breaker, want) || o.charged != 6 {
		t.Errorf("phase 2: breaker %v, %d charged; want %v and 6", o.breaker, o.charged, want)
	}
	if !strings.HasPrefix(o.limitsSet, "concurrency 1,") || !strings.HasPrefix(o.limitsReset, "concurrency 2,") || len(o.limitsAuditBy) != 3 {
		t.Errorf("phase 3: set %q, reset %q, audit %v", o.limitsSet, o.limitsReset, o.limitsAuditBy)
	}
	for _, want := range []string{"step_throttling", "breaker_history", "downstream_status", env.Schema + ".attempt_timeline"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out.String())
	}
}
