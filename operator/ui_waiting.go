package operator

import (
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
)

// WaitKind is what a queued run waits for, as its row records it.
type WaitKind string

// The kinds of wait a run's row records (runs.waiting_for and run_after).
const (
	// WaitNone: the run is not queued (it runs, or has ended).
	WaitNone WaitKind = ""
	// WaitSleep: a durable sleep (sdk.Sleep), until Wait.Until.
	WaitSleep WaitKind = "sleep"
	// WaitSignal: a signal named Wait.Signal (sdk.Receive), until the
	// timeout Wait.Until (zero: none).
	WaitSignal WaitKind = "signal"
	// WaitChild: the end of the child run Wait.Child (sdk.Call, Result of
	// an sdk.StartChild), with Wait.Until its timeout (zero: none).
	WaitChild WaitKind = "child"
	// WaitLimit: the limits of the downstream Wait.Downstream (package
	// flow) denied the run's step: it waits, charged nothing, until a
	// release wakes it (a concurrency slot given back, a breaker closed;
	// Wait.Until zero) or until Wait.Until (a rate, a retry budget, a
	// breaker's probe).
	WaitLimit WaitKind = "limit"
	// WaitDue: nothing the workflow asked for; the run is due at
	// Wait.Until (a run started with a delay, a durable backoff after a
	// failed attempt, or, once Until has passed, its turn for a worker). The
	// run's attempts tell a backoff apart (the web UI says which).
	WaitDue WaitKind = "due"
)

// Wait is what a queued run waits for, read from its row: the kind, the
// time it ends (zero: never by itself), and the signal or child it names.
type Wait struct {
	Kind       WaitKind
	Until      time.Time
	Signal     string    // WaitSignal's name
	Child      uuid.UUID // WaitChild's run
	Downstream string    // WaitLimit's downstream
}

// WaitingFor says what run waits for, from its row alone (record.Run.WaitingFor,
// "sleep", "signal:<name>", "child:<id>" or "limit:<downstream>", and
// record.Run.RunAfter): the one
// reading of those columns, which the web UI completes with the run's
// attempts (a backoff) and workers (none serves it), and the CLI prints. A
// run that is not queued waits for nothing (WaitNone).
func WaitingFor(r record.Run) Wait {
	if r.Status != store.RunQueued {
		return Wait{}
	}
	w := Wait{Kind: WaitDue, Until: r.RunAfter}
	kind, arg, _ := strings.Cut(r.WaitingFor, ":")
	switch kind {
	case "sleep":
		w.Kind = WaitSleep
	case "signal":
		w.Kind, w.Signal = WaitSignal, arg
	case "child":
		w.Kind = WaitChild
		if id, err := uuid.Parse(arg); err == nil {
			w.Child = id
		}
	case "limit":
		w.Kind, w.Downstream = WaitLimit, arg
	}
	return w
}

// String says w in a line, with its time in RFC 3339 (UTC), e.g.
// `signal "approve", timeout 2026-12-02T10:00:00Z`.
func (w Wait) String() string {
	until := func(what string) string {
		if w.Until.IsZero() {
			return what
		}
		return what + " " + w.Until.UTC().Format(time.RFC3339)
	}
	switch w.Kind {
	case WaitSleep:
		return until("sleep until")
	case WaitSignal:
		if w.Until.IsZero() {
			return fmt.Sprintf("signal %q, no timeout", w.Signal)
		}
		return fmt.Sprintf("signal %q, timeout %s", w.Signal, w.Until.UTC().Format(time.RFC3339))
	case WaitChild:
		if w.Until.IsZero() {
			return fmt.Sprintf("child run %s to end", w.Child)
		}
		return fmt.Sprintf("child run %s to end, timeout %s", w.Child, w.Until.UTC().Format(time.RFC3339))
	case WaitLimit:
		if w.Until.IsZero() {
			return fmt.Sprintf("limits of downstream %q, until a release", w.Downstream)
		}
		return fmt.Sprintf("limits of downstream %q, due at %s", w.Downstream, w.Until.UTC().Format(time.RFC3339))
	case WaitDue:
		return until("due at")
	}
	return "nothing: not queued"
}
