package activities_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/policy"
)

// panicOf returns the value declare panicked with, as an error.
func panicOf(t *testing.T, declare func()) error {
	t.Helper()
	var p any
	func() {
		defer func() { p = recover() }()
		declare()
	}()
	if p == nil {
		t.Fatal("no panic")
	}
	err, ok := p.(error)
	if !ok {
		t.Fatalf("panic value %T %v is not an error", p, p)
	}
	return err
}

// Declaration panics carry typed errors, so that a recover (or a test of a
// program's declarations) can tell them apart with errors.Is and errors.As.
func TestNew_PanicsWithTypedErrors(t *testing.T) {
	fn := func(ctx context.Context, in int) (int, error) { return in, nil }
	txFn := func(ctx context.Context, tx pgx.Tx, in int) (int, error) { return in, nil }
	var ve *policy.ValidationError
	for _, tc := range []struct {
		name    string
		declare func()
		is      error // matched with errors.Is, when set
		field   string
	}{
		{"New invalid policy", func() { activities.New("a", fn, policy.MaxAttempts(0)) }, nil, "max_attempts"},
		{"NewTx invalid policy", func() { activities.NewTx("a", txFn, policy.Exponential(0, 2, 0)) }, nil, "backoff.initial"},
		{"NewTx at most once", func() { activities.NewTx("a", txFn, policy.AtMostOnce()) }, activities.ErrAtMostOnceTx, ""},
		{"New empty name", func() { activities.New("", fn) }, activities.ErrInvalidDeclaration, ""},
		{"NewTx empty name", func() { activities.NewTx("", txFn) }, activities.ErrInvalidDeclaration, ""},
		{"New nil function", func() { activities.New[int, int]("a", nil) }, activities.ErrInvalidDeclaration, ""},
		{"NewTx nil function", func() { activities.NewTx[int, int]("a", nil) }, activities.ErrInvalidDeclaration, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := panicOf(t, tc.declare)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("panic %v: errors.Is(%v) is false", err, tc.is)
			}
			if tc.field != "" && (!errors.As(err, &ve) || ve.Field != tc.field) {
				t.Fatalf("panic %v: want a *policy.ValidationError for %s", err, tc.field)
			}
		})
	}
}

// Calls refuses a nil downstream at declaration; the key of an input that
// does not decode, or that is longer than MaxKey, is a permanent error.
func TestCalls_KeyErrorsArePermanent(t *testing.T) {
	type in struct{ Account string }
	act := activities.New("charge", func(ctx context.Context, x in) (int, error) { return 0, nil })
	if err := panicOf(t, func() { act.Calls(nil, nil) }); !errors.Is(err, activities.ErrInvalidDeclaration) {
		t.Fatalf("Calls(nil): panic %v, want ErrInvalidDeclaration", err)
	}
	ds := flow.New("payments")
	keyed := act.Calls(ds, func(x in) string { return x.Account })
	if k, err := act.Calls(ds, nil).Key([]byte(`{"Account": "a"}`)); k != "" || err != nil {
		t.Fatalf("no key function: %q, %v; want one key for all calls", k, err)
	}
	if _, err := keyed.Key([]byte(`not json`)); !errors.Is(err, activities.ErrBadInput) || !policy.IsPermanent(err) {
		t.Fatalf("bad input: %v, want a permanent ErrBadInput", err)
	}
	long := strings.Repeat("k", activities.MaxKey+1)
	if _, err := keyed.Key([]byte(`{"Account": "` + long + `"}`)); !errors.Is(err, activities.ErrBadKey) || !policy.IsPermanent(err) {
		t.Fatalf("long key: %v, want a permanent ErrBadKey", err)
	}
	if k, err := keyed.Key([]byte(`{"Account": "` + long[1:] + `"}`)); len(k) != activities.MaxKey || err != nil {
		t.Fatalf("a key of MaxKey bytes: %d bytes, %v", len(k), err)
	}
}
