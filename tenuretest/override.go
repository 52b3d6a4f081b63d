package tenuretest

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/override"
)

// replacement is one activity's function, replaced.
type replacement struct {
	name string
	impl activities.Definition
	err  error
}

// Override replaces the function of act in the env's worker with fn, for
// this test only: the workflow's code is untouched and calls act as ever.
// The activity keeps everything else: its name (recorded on its attempts,
// and matched by the determinism check), its policy (fn's errors are
// retried and classified by it, e.g. policy.Permanent), its at-most-once
// promise and, for a transactional activity, its transaction (begun for
// each attempt and committed with the step's checkpoint; fn does not see
// it: use OverrideTx for that). fn is called with the attempt's context, so
// [activities.IdempotencyKey] and [activities.InfoFrom] work in it.
//
// When an activity is overridden more than once, the last override wins, so
// a test can refine the fakes a helper of its package sets. An override
// needs a worker (Workflows). Activities are replaced by name, so an
// override also applies to another activity declared with the same name.
func Override[In, Out any](act *activities.Activity[In, Out], fn func(ctx context.Context, in In) (Out, error)) Option {
	return func(s *settings) {
		if fn == nil {
			s.overrides = append(s.overrides, replacement{name: act.Name(), err: fmt.Errorf("Override(%q): nil function", act.Name())})
			return
		}
		s.overrides = append(s.overrides, replacement{name: act.Name(), impl: activities.New(act.Name(), fn)})
	}
}

// OverrideTx replaces the function of a transactional activity (declared
// with activities.NewTx) with fn, which receives the step's transaction: its
// writes commit together with the step's checkpoint, exactly once, and roll
// back when fn returns an error or the lease was lost, as the real
// function's would. See Override for what the activity keeps.
func OverrideTx[In, Out any](act *activities.Activity[In, Out], fn func(ctx context.Context, tx pgx.Tx, in In) (Out, error)) Option {
	return func(s *settings) {
		r := replacement{name: act.Name()}
		switch {
		case fn == nil:
			r.err = fmt.Errorf("OverrideTx(%q): nil function", act.Name())
		case !act.Transactional():
			r.err = fmt.Errorf("OverrideTx(%q): the activity is not transactional (declared with activities.New), so it has no transaction to give: use Override", act.Name())
		default:
			r.impl = activities.NewTx(act.Name(), fn)
		}
		s.overrides = append(s.overrides, r)
	}
}

// table is the worker's override table, or the settings' mistakes.
func (s *settings) table() (override.Table, error) {
	if len(s.overrides) == 0 {
		return nil, nil
	}
	var errs []error
	if len(s.workflows) == 0 {
		errs = append(errs, errors.New("an activity is overridden but no workflow is registered (Workflows), so no worker runs it"))
	}
	t := override.Table{}
	for _, r := range s.overrides {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		t[r.name] = r.impl // the last override wins
	}
	return t, errors.Join(errs...)
}
