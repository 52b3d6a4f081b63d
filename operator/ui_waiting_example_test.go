package operator_test

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
)

// WaitingFor reads what a queued run waits for from its row (as Run and
// Runs return it): the web UI and the CLI say it from this one reading.
func ExampleWaitingFor() {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, r := range []record.Run{
		{Status: record.RunQueued, WaitingFor: "sleep", RunAfter: at},
		{Status: record.RunQueued, WaitingFor: "signal:approve", RunAfter: at},
		{Status: record.RunQueued, WaitingFor: "signal:approve"}, // run_after infinity: no timeout
		{Status: record.RunQueued, WaitingFor: "child:" + uuid.MustParse("0193a2b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b").String()},
		{Status: record.RunQueued, WaitingFor: "limit:payments", RunAfter: at}, // a rate limit
		{Status: record.RunQueued, WaitingFor: "limit:payments"},               // a concurrency slot, a breaker
		{Status: record.RunQueued, RunAfter: at},                               // a delay, a backoff, or its turn
		{Status: record.RunRunning},
	} {
		w := operator.WaitingFor(r)
		fmt.Printf("%-6s %s\n", w.Kind, w)
	}
	// Output:
	// sleep  sleep until 2026-12-02T10:00:00Z
	// signal signal "approve", timeout 2026-12-02T10:00:00Z
	// signal signal "approve", no timeout
	// child  child run 0193a2b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b to end
	// limit  limits of downstream "payments", due at 2026-12-02T10:00:00Z
	// limit  limits of downstream "payments", until a release
	// due    due at 2026-12-02T10:00:00Z
	//        nothing: not queued
}
