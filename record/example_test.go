package record_test

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
)

// A run as sdk's Result or operator's Run returns it: its status says
// whether it ended, and a failed run carries its open failure.
func Example() {
	failedAt := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	run := record.Run{
		ID:         uuid.MustParse("0195a1b2-0000-7000-8000-000000000001"),
		Workflow:   "charge",
		Status:     record.RunFailed,
		FinishedAt: &failedAt,
		Failure: &record.Failure{
			Reason:   policy.RetriesExhausted,
			Step:     2,
			Activity: "card.Charge",
			Attempts: 5, Errors: 5,
			ErrorMessage: "card declined",
			FailedAt:     failedAt,
		},
	}
	fmt.Println(run.Workflow, run.Status, run.Status.Terminal())
	if f := run.Failure; f != nil {
		fmt.Printf("gave up at step %d (%s): %s after %d attempts: %s\n", f.Step, f.Activity, f.Reason, f.Attempts, f.ErrorMessage)
	}
	// Output:
	// charge failed true
	// gave up at step 2 (card.Charge): retries_exhausted after 5 attempts: card declined
}

// The statuses are the values the tables' CHECK constraints allow, in their
// order; only completed, failed and cancelled runs have ended.
func ExampleRunStatuses() {
	for _, s := range record.RunStatuses() {
		fmt.Println(s, s.Terminal())
	}
	// Output:
	// queued false
	// running false
	// completed true
	// failed true
	// cancelled true
}

// An audit log row on one line, as the CLI's audit listing prints it.
func ExampleAuditEntry_String() {
	e := record.AuditEntry{Action: "requeue", Runs: 3, Actor: "postgres", Note: "INC-42"}
	fmt.Println(e)
	e = record.AuditEntry{Action: "purge_failures", Runs: 120, Failures: 131, Actor: "ops"}
	fmt.Println(e)
	// Output:
	// requeue 3 runs by postgres (INC-42)
	// purge_failures 120 runs (131 failure rows) by ops
}
