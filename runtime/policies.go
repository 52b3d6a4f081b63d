package runtime

import (
	"encoding/json"
	"reflect"
	"sync"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
)

// policies keeps, per activity, the policy resolved from the worker's
// defaults and the activity's own options, with its JSON (recorded on each
// step's attempts). Resolving and encoding it on every step was about a
// quarter of the worker's CPU per step in bench/'s A' (encoding/json's float
// formatting alone grew each run's goroutine stack). A call with options of
// its own is resolved every time: options are functions, which cannot be
// compared, so such a policy cannot be looked up.
//
// The cache holds one entry per activity name, for the Definition it was
// resolved for: an activity declared anew under the same name (a test, a
// declaration inside a workflow function) replaces the entry, so the cache
// never grows beyond the worker's activity names.
type policies struct {
	defaults []policy.Option
	m        sync.Map // activity name → *resolvedPolicy
}

type resolvedPolicy struct {
	act  activities.Definition
	pol  policy.Retry
	json []byte
}

// resolve returns act's policy under opts, and its JSON. An invalid policy
// is the error of policy.Resolve; one that cannot be encoded is returned as
// encoding/json's error.
func (p *policies) resolve(act activities.Definition, opts []policy.Option) (policy.Retry, []byte, error) {
	cacheable := len(opts) == 0
	if cacheable {
		if v, ok := p.m.Load(act.Name()); ok {
			// Safe: only Definitions of a comparable dynamic type are
			// stored, and comparing one with a value of another type is
			// false, not a panic.
			if r := v.(*resolvedPolicy); r.act == act {
				return r.pol, r.json, nil
			}
		}
	}
	pol, err := policy.Resolve(p.defaults, act.Options(), opts)
	if err != nil {
		return pol, nil, err
	}
	js, err := json.Marshal(pol)
	if err != nil {
		return pol, nil, err
	}
	if cacheable && reflect.TypeOf(act).Comparable() {
		p.m.Store(act.Name(), &resolvedPolicy{act: act, pol: pol, json: js})
	}
	return pol, js, nil
}
