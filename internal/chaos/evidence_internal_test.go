package main

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/chaos/invariant"
)

// The evidence describes the runs a violation names in its detail too: an
// attempt over a limit names the calls in flight beside it, whose workers
// are what happened.
func TestEvidence_NamesTheRunsOfAViolationsDetail(t *testing.T) {
	over, a, b := uuid.New(), uuid.New(), uuid.New()
	vs := []invariant.Violation{
		{Rule: invariant.NeverOverLimit, RunID: over, Step: 2,
			Detail: "attempt 1 (run " + over.String() + " step 2 attempt 1) started with 3 attempts in flight, limit 2: run " +
				a.String() + " step 2 attempt 2 lost; run " + b.String() + " step 2 attempt 1 lost"},
		{Rule: invariant.NeverOverLimit, Detail: "a violation of no one run"},
	}
	if got, want := named(vs), []uuid.UUID{over, a, b}; !slices.Equal(got, want) {
		t.Fatalf("named %v, want %v", got, want)
	}
}
