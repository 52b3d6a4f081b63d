package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

type order struct{ ID int }

// processorFixed is flipped when the "fix" for the charge activity ships.
var processorFixed atomic.Bool

var charge = activities.New("charge", func(ctx context.Context, o order) (int, error) {
	if !processorFixed.Load() {
		return 0, errors.New("card processor down")
	}
	return o.ID, nil
}, policy.MaxAttempts(2), policy.Constant(5*time.Millisecond), policy.Jitter(policy.NoJitter))

var validate = activities.New("validate", func(ctx context.Context, o order) (int, error) {
	return 0, policy.Permanent(errors.New("invalid address"))
})

var ship = activities.New("ship", func(ctx context.Context, o order) (int, error) { return o.ID, nil })

var placeOrder = sdk.NewWorkflow("place-order", func(ctx context.Context, o order) (int, error) {
	if _, err := sdk.Execute(ctx, ship, o); err != nil {
		return 0, err
	}
	return sdk.Execute(ctx, charge, o)
})

var checkAddress = sdk.NewWorkflow("check-address", func(ctx context.Context, o order) (int, error) {
	return sdk.Execute(ctx, validate, o)
})

var shipOnly = sdk.NewWorkflow("ship-only", func(ctx context.Context, o order) (int, error) {
	return sdk.Execute(ctx, ship, o)
})

func TestCLI_FailuresFromListToRequeueToPurge(t *testing.T) {
	processorFixed.Store(false)
	e := newEnv(t, placeOrder, checkAddress, shipOnly)
	s := e.schema
	var failed []*sdk.Run[int]
	for i := range 2 {
		r, err := sdk.Start(t.Context(), e.client, placeOrder, order{ID: i + 1})
		if err != nil {
			t.Fatal(err)
		}
		failed = append(failed, r)
	}
	bad, _ := sdk.Start(t.Context(), e.client, checkAddress, order{ID: 3})
	ok, _ := sdk.Start(t.Context(), e.client, shipOnly, order{ID: 4})
	for _, r := range append(failed, bad) {
		if _, err := wait(t, r); err == nil {
			t.Fatalf("run %s succeeded; want a failure", r.ID)
		}
	}
	if _, err := wait(t, ok); err != nil {
		t.Fatal(err)
	}
	first := failed[0].ID.String()

	// What failed, why, since when.
	expect(t, tenure(t, s, "failures", "list"), 0, "RUN", "REASON", first, failed[1].ID.String(),
		"retries_exhausted", "non_retryable", "card processor down", "invalid address")
	r := tenure(t, s, "failures", "list", "--activity", "validate", "--since", "1h", "--json")
	expect(t, r, 0)
	var rows []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 || rows[0]["reason"] != "non_retryable" || rows[0]["run_id"] != bad.ID.String() {
		t.Fatalf("failures list --json: %v, %v", rows, err)
	}
	expect(t, tenure(t, s, "failures", "list", "--reason", "indeterminate"), 0, "no failures match")
	expect(t, tenure(t, s, "failures", "stats"), 0, "charge", "retries_exhausted", "validate")

	// The timeline of one run, and its policy explained.
	expect(t, tenure(t, s, "runs", "show", first), 0,
		"status    failed", "failure   retries_exhausted at step 2 (charge) after 2 attempts (2 errors, 0 rescues)",
		"step 1  ship  completed", "step 2  charge  failed: retries_exhausted",
		"policy  max_attempts=2", "backoff=constant(5ms)", "DELAY NEXT", "5ms", "policy", "cli-test-worker")
	r = tenure(t, s, "runs", "show", first, "--json")
	var shown struct {
		Steps []struct {
			Activity string `json:"activity"`
			Attempts []struct {
				Status  string `json:"status"`
				DelayMS *int64 `json:"delay_ms"`
			} `json:"attempts"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || len(shown.Steps) != 2 || len(shown.Steps[1].Attempts) != 2 ||
		*shown.Steps[1].Attempts[0].DelayMS != 5 {
		t.Fatalf("runs show --json: %+v, %v\n%s", shown, err, r)
	}
	expect(t, tenure(t, s, "explain", first, "2"), 0, "step 2 (charge)", "after attempt  delay", "worst case: 5ms")
	expect(t, tenure(t, s, "explain", first, "9"), 3, "has no step 9")
	expect(t, tenure(t, s, "runs", "show", uuid.NewString()), 3, "not found")
	expect(t, tenure(t, s, "runs", "show", "not-a-uuid"), 2, "invalid run ID")
	expect(t, tenure(t, s, "runs", "list", "--status", "failed"), 0, first, "retries_exhausted at step 2 (charge)")
	expect(t, tenure(t, s, "runs", "list", "--status", "bogus"), 2, "unknown status")

	// Put them back: dry run first, then for real once the fix is out.
	expect(t, tenure(t, s, "failures", "requeue"), 2, "give run IDs, a filter")
	expect(t, tenure(t, s, "failures", "requeue", "--activity", "charge", "--dry-run"), 0,
		first, "2 runs would be requeued (dry run: nothing changed)")
	expect(t, tenure(t, s, "failures", "list", "--activity", "charge"), 0, first) // still there
	expect(t, tenure(t, s, "failures", "requeue", ok.ID.String()), 1, "is completed", "run is not failed")
	expect(t, tenure(t, s, "failures", "requeue", uuid.NewString()), 3, "not found")
	processorFixed.Store(true)
	expect(t, tenure(t, s, "failures", "requeue", "--activity", "charge", "--note", "INC-1", "--batch-size", "1"), 0, "requeued 2 runs")
	for _, r := range failed {
		if out, err := wait(t, r); err != nil || out == 0 {
			t.Fatalf("requeued run %s: %d, %v", r.ID, out, err)
		}
	}
	r = tenure(t, s, "audit", "--json")
	var audit []struct {
		Action string         `json:"action"`
		Runs   int            `json:"runs"`
		Note   string         `json:"note"`
		Filter map[string]any `json:"filter"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &audit); err != nil || len(audit) != 2 || audit[0].Runs != 1 ||
		audit[0].Note != "INC-1" || audit[0].Filter["activity"] != "charge" {
		t.Fatalf("audit after a requeue in batches of 1: %+v, %v\n%s", audit, err, r)
	}
	expect(t, tenure(t, s, "runs", "show", first), 0, "requeued  1 time\n", "1*", "2*", "made before a requeue")

	// Retention: explicit, counted, failure history only when asked.
	expect(t, tenure(t, s, "purge"), 2, "give --completed-older-than")
	// An age of days that would wrap around is refused, not read as a short one.
	expect(t, tenure(t, s, "purge", "--completed-older-than", "999999999d"), 2, `invalid age "999999999d": at most 106751d`)
	expect(t, tenure(t, s, "purge", "--completed-older-than", "0s", "--dry-run"), 0, "completed runs: would delete 1 run\n", "dry run")
	expect(t, tenure(t, s, "purge", "--completed-older-than", "30d"), 0, "completed runs: deleted 0 runs")
	expect(t, tenure(t, s, "purge", "--completed-older-than", "0s", "--failures-older-than", "0s", "--note", "test"), 0,
		"completed runs: deleted 1 run\n", "failure history: deleted 3 runs and 3 failure rows")
	expect(t, tenure(t, s, "runs", "list"), 0, "no runs match") // all purged
	expect(t, tenure(t, s, "audit"), 0, "purge_failures", "purge_completed", "requeue", "INC-1")
}

func TestCLI_MigrateAndTheSchemaMissingError(t *testing.T) {
	s := pgtest.Schema(t) // exists, but empty
	expect(t, tenure(t, s, "failures", "list"), 4, `schema "`+s+`" has no Tenure tables`, `run "tenure migrate up --schema `+s+`" to create them`)
	expect(t, tenure(t, s, "migrate", "status"), 0, "0001", "init", "pending", "tenure migrate up")
	expect(t, tenure(t, s, "migrate", "up"), 0, "migrated from version 0 to")
	expect(t, tenure(t, s, "migrate", "up"), 0, "up to date")
	r := tenure(t, s, "migrate", "status", "--json")
	var st []struct {
		Version int  `json:"version"`
		Applied bool `json:"applied"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st) < 2 || !st[len(st)-1].Applied {
		t.Fatalf("migrate status --json: %+v, %v", st, err)
	}
	expect(t, tenure(t, s, "failures", "list"), 0, "no failures match")
}

func TestCLI_UsageErrorsAndHelp(t *testing.T) {
	s := "tenure"
	expect(t, tenure(t, s, "--help"), 0, "Exit status:", "3  not found", "5  the run failed or was cancelled", "failures", "DATABASE_URL",
		"--key", "--after", "tenure runs start", "tenure runs result", "tenure runs count", "tenure runs delete", "--print-sql")
	expect(t, tenure(t, s, "runs", "--help"), 0, "start", "list", "count", "show", "result", "signal", "cancel", "delete")
	expect(t, tenure(t, s, "runs", "result", "--help"), 0, "--follow", "--timeout", "--key", "exit 5", "LISTEN", "200 ms")
	expect(t, tenure(t, s, "failures", "requeue", "--help"), 0, "--dry-run", "indeterminate", "audit")
	expect(t, tenure(t, s, "nonsense"), 2, `unknown command "nonsense"`)
	expect(t, tenure(t, s, "runs", "nonsense"), 2, `unknown command "nonsense" for "tenure runs"`)
	expect(t, tenure(t, s, "failures", "list", "--no-such-flag"), 2, "unknown flag")
	expect(t, tenure(t, s, "failures", "list", "--since", "yesterday"), 2, "--since")
	expect(t, tenure(t, s, "explain", uuid.NewString()), 2, "takes 2 arguments, got 1")
	expect(t, tenure(t, "Bad-Schema", "failures", "list"), 2, "invalid schema name")
	r := tenure(t, s, "runs")
	if r.code != 0 || !strings.Contains(r.stdout, "Available Commands") {
		t.Fatalf("a command group alone prints its help\n%s", r)
	}
}
