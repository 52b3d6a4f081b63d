// Package override is the private hook through which package tenuretest
// replaces the function of an activity in a worker, without touching the
// workflow that calls it. The table travels in the context given to the
// worker's Run or Start, so the runtime exports nothing for it and no
// package-level state is shared between workers: only code in this module
// can set it.
package override

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
)

// Table maps activity names to replacements. Only a replacement's Invoke is
// used: the activity keeps its name, its policy and whether it is
// transactional (a transactional activity's replacement receives the step's
// transaction).
type Table map[string]activities.Definition

type tableKey struct{}

// With returns ctx carrying t.
func With(ctx context.Context, t Table) context.Context {
	return context.WithValue(ctx, tableKey{}, t)
}

// From returns the table ctx carries, or nil.
func From(ctx context.Context) Table {
	t, _ := ctx.Value(tableKey{}).(Table)
	return t
}

// Apply returns act with its function replaced when t has a replacement for
// its name, else act itself.
func (t Table) Apply(act activities.Definition) activities.Definition {
	if r, ok := t[act.Name()]; ok {
		return replaced{act: act, impl: r}
	}
	return act
}

// replaced is an activity whose function is another's.
type replaced struct {
	act, impl activities.Definition
}

func (r replaced) Name() string             { return r.act.Name() }
func (r replaced) Options() []policy.Option { return r.act.Options() }
func (r replaced) Transactional() bool      { return r.act.Transactional() }
func (r replaced) Invoke(ctx context.Context, tx pgx.Tx, input []byte) ([]byte, error) {
	return r.impl.Invoke(ctx, tx, input)
}
