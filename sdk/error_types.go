package sdk

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// WithErrorType registers E, an error type the workflow's activities return
// and the workflow branches on, so that the workflow sees the same error
// when a step that gave up is replayed as when it gave up. Register the type
// exactly as the activities return it: *CardDeclined for &CardDeclined{...}.
//
// Without it, a workflow replayed after a crash or a suspension gets, for a
// step that gave up, an *ActivityError with the error's message and type
// name only (Err nil): errors.As(err, &target) is true the first time and
// false on replay, and a workflow that branches on it takes another path.
//
// With it, when a step gives up, the first error in the chain of its last
// error (in the order errors.As walks it) whose type is registered is stored
// as JSON (encoding/json: exported fields, or the type's own MarshalJSON and
// UnmarshalJSON) with its type name, in the step's error_value and
// error_type columns. Both the first time and on replay, ActivityError.Err
// is that value decoded from its JSON, so errors.As finds the same value
// both times. Only that error is kept: other errors of the chain, and fields
// JSON does not carry, are gone both times (the full message stays in
// ActivityError.Message). An error that does not encode, or exceeds the
// worker's MaxPayload, is logged and leaves Err nil both times. Steps that
// gave up with no registered error in their chain behave as without
// WithErrorType.
//
// Every worker running the workflow registers the same types, since they
// come with its declaration. NewWorkflow panics when E is an interface type
// (only a concrete type can be decoded) or two registered types have the
// same name.
func WithErrorType[E error]() WorkflowOption {
	t := errorType{
		rtype: reflect.TypeFor[E](),
		decode: func(value []byte) (error, error) {
			var e E
			if err := json.Unmarshal(value, &e); err != nil {
				return nil, err
			}
			return e, nil
		},
	}
	t.name = t.rtype.String()
	return func(o *workflowOptions) { o.errorTypes = append(o.errorTypes, t) }
}

// errorType is one type registered with WithErrorType.
type errorType struct {
	name   string // as fmt's %T writes it, e.g. "*orders.CardDeclined"
	rtype  reflect.Type
	decode func(value []byte) (error, error)
}

// errorTypes is a workflow's registered error types; it implements
// engine.ErrorCodec.
type errorTypes struct {
	byName map[string]errorType
	byType map[reflect.Type]errorType
}

// newErrorTypes checks the registered types of workflow name.
func newErrorTypes(name string, types []errorType) (*errorTypes, error) {
	if len(types) == 0 {
		return nil, nil
	}
	ts := &errorTypes{byName: map[string]errorType{}, byType: map[reflect.Type]errorType{}}
	for _, t := range types {
		if t.rtype.Kind() == reflect.Interface {
			return nil, fmt.Errorf("sdk.NewWorkflow(%q): WithErrorType[%s]: an interface type cannot be decoded, register the concrete type: %w", name, t.name, ErrInvalidWorkflow)
		}
		if _, dup := ts.byName[t.name]; dup {
			return nil, fmt.Errorf("sdk.NewWorkflow(%q): WithErrorType[%s] registered twice, or two types of that name: %w", name, t.name, ErrInvalidWorkflow)
		}
		ts.byName[t.name], ts.byType[t.rtype] = t, t
	}
	return ts, nil
}

// EncodeError implements engine.ErrorCodec.
func (ts *errorTypes) EncodeError(err error) (typ string, value []byte, ok bool, encErr error) {
	found := ts.find(err)
	if found == nil {
		return "", nil, false, nil
	}
	name := ts.byType[reflect.TypeOf(found)].name
	value, encErr = json.Marshal(found)
	if encErr != nil {
		return name, nil, true, fmt.Errorf("encode %s: %w", name, encErr)
	}
	return name, value, true, nil
}

// find returns the first error of err's tree, in the order errors.As walks
// it, whose type is registered.
func (ts *errorTypes) find(err error) error {
	for err != nil {
		if _, ok := ts.byType[reflect.TypeOf(err)]; ok {
			return err
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if found := ts.find(e); found != nil {
					return found
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}

// DecodeError implements engine.ErrorCodec.
func (ts *errorTypes) DecodeError(typ string, value []byte) (error, error) {
	t, ok := ts.byName[typ]
	if !ok {
		return nil, fmt.Errorf("error type %s is not registered with this workflow (sdk.WithErrorType)", typ)
	}
	e, err := t.decode(value)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", typ, err)
	}
	return e, nil
}
