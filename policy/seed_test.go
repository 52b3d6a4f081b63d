package policy_test

import (
	"fmt"
	"testing"

	"github.com/tenurehq/tenure/policy"
)

func TestSeed(t *testing.T) {
	// Golden values, computed independently as FNV-1a 64 of the run ID and
	// the big-endian step and attempt. Seeds are stored with attempts, so
	// they must never change.
	golden := []struct {
		run           string
		step, attempt int
		want          uint64
	}{
		{"run-1", 1, 2, 13592919687040241621},
		{"", 0, 0, 9808874869469701221},
	}
	for _, g := range golden {
		if got := policy.Seed(g.run, g.step, g.attempt); got != g.want {
			t.Errorf("Seed(%q, %d, %d) = %d, want %d", g.run, g.step, g.attempt, got, g.want)
		}
	}
	seen := map[uint64]string{}
	for _, in := range []struct {
		run           string
		step, attempt int
	}{
		{"run-1", 1, 1}, {"run-1", 1, 2}, {"run-1", 2, 1}, {"run-2", 1, 1},
		{"", 0, 0}, {"run-1\x00", 1, 1}, {"run-", 11, 1}, {"run-1", -1, 1},
	} {
		key := fmt.Sprintf("%q/%d/%d", in.run, in.step, in.attempt)
		s := policy.Seed(in.run, in.step, in.attempt)
		if prev, ok := seen[s]; ok {
			t.Errorf("Seed collision between %s and %s", prev, key)
		}
		seen[s] = key
	}
}
