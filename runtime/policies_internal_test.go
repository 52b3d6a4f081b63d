package runtime

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
)

// TestPolicies_CachedPerDeclarationNeverForCallOptions: a policy is looked
// up only for the very Definition it was resolved for and never for a call
// with options of its own, so a cached policy is always the one Resolve
// would give.
func TestPolicies_CachedPerDeclarationNeverForCallOptions(t *testing.T) {
	fn := func(context.Context, int) (int, error) { return 0, nil }
	p := &policies{defaults: []policy.Option{policy.MaxAttempts(7)}}
	maxAttempts := func(act activities.Definition, opts ...policy.Option) int {
		t.Helper()
		pol, js, err := p.resolve(act, opts)
		if err != nil {
			t.Fatal(err)
		}
		var back policy.Retry
		if err := json.Unmarshal(js, &back); err != nil || back.MaxAttempts != pol.MaxAttempts {
			t.Fatalf("the JSON %s is not the policy %+v: %v", js, pol, err)
		}
		return pol.MaxAttempts
	}
	a := activities.New("a", fn, policy.MaxAttempts(3))
	if n := maxAttempts(a); n != 3 {
		t.Fatalf("declared: %d", n)
	}
	if n := maxAttempts(a); n != 3 {
		t.Fatalf("cached: %d", n)
	}
	if n := maxAttempts(a, policy.MaxAttempts(9)); n != 9 {
		t.Fatalf("a call's own options: %d", n)
	}
	again := activities.New("a", fn) // the same name declared anew: the worker's default
	if n := maxAttempts(again); n != 7 {
		t.Fatalf("a new declaration under the same name: %d", n)
	}
	if n := maxAttempts(a); n != 3 {
		t.Fatalf("the first declaration after the second: %d", n)
	}
	if _, _, err := p.resolve(activities.New("bad", fn), []policy.Option{policy.MaxAttempts(0)}); err == nil {
		t.Fatal("an invalid call policy was accepted")
	}
}
