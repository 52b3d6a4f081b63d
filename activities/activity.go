package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/policy"
)

// Definition is an activity with its types erased, as the runtime handles it.
// *Activity implements it; application code has no need to.
type Definition interface {
	// Name is the activity's registered name, recorded on every step and attempt.
	Name() string
	// Options are the activity's default policy options.
	Options() []policy.Option
	// Transactional reports whether the activity runs in the step's transaction.
	Transactional() bool
	// Invoke decodes the JSON input, calls the function and encodes its output.
	// tx is the step's transaction for a transactional activity, else nil.
	Invoke(ctx context.Context, tx pgx.Tx, input []byte) ([]byte, error)
}

// Activity is a declared activity taking In and returning Out. In and Out are
// stored as JSON, so they must survive encoding/json.
type Activity[In, Out any] struct {
	name string
	fn   func(context.Context, pgx.Tx, In) (Out, error)
	tx   bool
	opts []policy.Option
	ds   *flow.Downstream
	key  func(In) string
}

// Limited is implemented by an activity that calls a downstream (see
// Activity.Calls): the runtime admits each of its attempts under the
// downstream's limits, for the key taken from its input.
type Limited interface {
	// Downstream is the downstream the activity calls.
	Downstream() *flow.Downstream
	// Key is the key of the downstream's limits for this JSON input ("" for
	// one key for all calls).
	Key(input []byte) (string, error)
}

// Calls returns a copy of a that calls downstream d: each attempt is
// admitted under d's limits (concurrency, rate, retry budget, breaker)
// before it starts, and waits, charged nothing, while they deny it. key
// takes the key of per-key limits from the input (a tenant, an account);
// nil: one key for all calls. Calls panics on a nil d, as New does on a bad
// declaration. See package flow.
func (a *Activity[In, Out]) Calls(d *flow.Downstream, key func(In) string) *Activity[In, Out] {
	if d == nil {
		panic(fmt.Errorf("activity %q: Calls(nil): %w", a.name, ErrInvalidDeclaration))
	}
	c := *a
	c.ds, c.key = d, key
	return &c
}

// Downstream returns the downstream a calls (see Calls), or nil.
func (a *Activity[In, Out]) Downstream() *flow.Downstream { return a.ds }

// MaxKey is the longest key, in bytes, that an activity's key function may
// return: a longer one fails the step (a key is stored in rows and indexes).
const MaxKey = 200

// ErrBadKey marks a key longer than MaxKey.
var ErrBadKey = errors.New("downstream key too long")

// Key decodes input and returns its key under the downstream's limits
// ("" without a key function). An input that does not decode wraps
// ErrBadInput; a key longer than MaxKey wraps ErrBadKey; both are
// permanent.
func (a *Activity[In, Out]) Key(input []byte) (string, error) {
	if a.key == nil {
		return "", nil
	}
	var in In
	if err := json.Unmarshal(input, &in); err != nil {
		return "", policy.Permanent(fmt.Errorf("activity %q: %w: %w", a.name, ErrBadInput, err))
	}
	k := a.key(in)
	if len(k) > MaxKey {
		return "", policy.Permanent(fmt.Errorf("activity %q: key of downstream %q is %d bytes, at most %d: %w", a.name, a.ds.Name(), len(k), MaxKey, ErrBadKey))
	}
	return k, nil
}

// New declares an activity with its default policy. The policy is validated
// here, at declaration: New panics when the options make no sense (as
// regexp.MustCompile does for a bad pattern), so a bad policy stops the
// program at start-up, never a run at 3 a.m. The panic's value is an error
// wrapping the *policy.ValidationError (match it with errors.As), or
// ErrInvalidDeclaration for an empty name or a nil function. Use policy.New
// first to check options that come from configuration.
func New[In, Out any](name string, fn func(context.Context, In) (Out, error), opts ...policy.Option) *Activity[In, Out] {
	if fn == nil {
		panic(fmt.Errorf("activities.New(%q): nil function: %w", name, ErrInvalidDeclaration))
	}
	return declare("activities.New", name, func(ctx context.Context, _ pgx.Tx, in In) (Out, error) { return fn(ctx, in) }, false, opts)
}

// NewTx declares a transactional activity: fn receives the transaction in
// which the step's result is checkpointed, so its database writes and the
// checkpoint commit together, exactly once. If the worker lost the run's lease
// meanwhile, the checkpoint is refused and the transaction rolls back. A
// transactional activity is never indeterminate: a lost attempt's transaction
// never committed, so it is simply run again (charged to MaxRescues).
//
// NewTx panics as New does; with policy.AtMostOnce, the panic's value wraps
// ErrAtMostOnceTx (match it with errors.Is).
func NewTx[In, Out any](name string, fn func(context.Context, pgx.Tx, In) (Out, error), opts ...policy.Option) *Activity[In, Out] {
	if fn == nil {
		panic(fmt.Errorf("activities.NewTx(%q): nil function: %w", name, ErrInvalidDeclaration))
	}
	return declare("activities.NewTx", name, fn, true, opts)
}

// declare checks a declaration and panics with an error value, so that a
// recover can match it with errors.Is and errors.As.
func declare[In, Out any](caller, name string, fn func(context.Context, pgx.Tx, In) (Out, error), tx bool, opts []policy.Option) *Activity[In, Out] {
	if name == "" {
		panic(fmt.Errorf("%s: empty activity name: %w", caller, ErrInvalidDeclaration))
	}
	p, err := policy.New(opts...)
	if err != nil {
		panic(fmt.Errorf("activity %q: invalid policy: %w", name, err))
	}
	if tx && p.AtMostOnce {
		panic(fmt.Errorf("activity %q: %w", name, ErrAtMostOnceTx))
	}
	return &Activity[In, Out]{name: name, fn: fn, tx: tx, opts: opts}
}

// Name returns the activity's name.
func (a *Activity[In, Out]) Name() string { return a.name }

// Options returns the activity's default policy options.
func (a *Activity[In, Out]) Options() []policy.Option { return a.opts }

// Transactional reports whether a was declared with NewTx.
func (a *Activity[In, Out]) Transactional() bool { return a.tx }

// ErrAtMostOnceTx rejects AtMostOnce on a transactional activity: its effects
// commit with the step's checkpoint, exactly once, so a lost attempt is simply
// rerun; at-most-once does not apply.
var ErrAtMostOnceTx = errors.New("AtMostOnce does not apply to a transactional activity: its effects commit exactly once with the checkpoint")

// ErrInvalidDeclaration is wrapped by the panic of New or NewTx given an
// empty name or a nil function.
var ErrInvalidDeclaration = errors.New("invalid activity declaration")

// ErrBadInput marks an input that does not decode into the function's type.
var ErrBadInput = errors.New("input does not decode")

// Invoke decodes input, calls the function and encodes its output. It is
// the runtime's entry point; a decoding failure is permanent (ErrBadInput).
func (a *Activity[In, Out]) Invoke(ctx context.Context, tx pgx.Tx, input []byte) ([]byte, error) {
	var in In
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, policy.Permanent(fmt.Errorf("activity %q: %w: %w", a.name, ErrBadInput, err))
	}
	out, err := a.fn(ctx, tx, in)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, policy.Permanent(fmt.Errorf("activity %q: encode output: %w", a.name, err))
	}
	return b, nil
}

// Call runs the activity's function directly, outside any workflow, with no
// retries and no history: for unit tests of the function itself.
func (a *Activity[In, Out]) Call(ctx context.Context, tx pgx.Tx, in In) (Out, error) {
	return a.fn(ctx, tx, in)
}
