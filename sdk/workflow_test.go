package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// NewWorkflow panics with typed errors, as activities.New does.
func TestNewWorkflow_PanicsWithTypedErrors(t *testing.T) {
	fn := func(ctx context.Context, in int) (int, error) { return in, nil }
	var ve *policy.ValidationError
	for _, tc := range []struct {
		name    string
		declare func()
		is      error
		field   string
	}{
		{"empty name", func() { sdk.NewWorkflow("", fn) }, sdk.ErrInvalidWorkflow, ""},
		{"nil function", func() { sdk.NewWorkflow[int, int]("w", nil) }, sdk.ErrInvalidWorkflow, ""},
		{"negative rescues", func() { sdk.NewWorkflow("w", fn, sdk.WithMaxRescues(-1)) }, nil, "max_rescues"},
		{"interface error type", func() { sdk.NewWorkflow("w", fn, sdk.WithErrorType[error]()) }, sdk.ErrInvalidWorkflow, ""},
		{"error type twice", func() {
			sdk.NewWorkflow("w", fn, sdk.WithErrorType[*json.SyntaxError](), sdk.WithErrorType[*json.SyntaxError]())
		}, sdk.ErrInvalidWorkflow, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p any
			func() {
				defer func() { p = recover() }()
				tc.declare()
			}()
			err, ok := p.(error)
			if !ok {
				t.Fatalf("panic value %T %v is not an error", p, p)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("panic %v: errors.Is(%v) is false", err, tc.is)
			}
			if tc.field != "" && (!errors.As(err, &ve) || ve.Field != tc.field) {
				t.Fatalf("panic %v: want a *policy.ValidationError for %s", err, tc.field)
			}
		})
	}
}
