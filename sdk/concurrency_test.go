package sdk_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tenurehq/tenure/sdk"
)

func TestWithConcurrency_RejectsWhatCannotWork(t *testing.T) {
	fn := func(ctx context.Context, in RefundReq) (string, error) { return "", nil }
	key := func(in RefundReq) string { return in.Order }
	for name, opt := range map[string]sdk.WorkflowOption{
		"another input type": sdk.WithConcurrency(sdk.Concurrency[OrderIn]{Key: func(OrderIn) string { return "" }}),
		"no key":             sdk.WithConcurrency(sdk.Concurrency[RefundReq]{}),
		"negative limit":     sdk.WithConcurrency(sdk.Concurrency[RefundReq]{Key: key, Limit: -1}),
		"unknown policy":     sdk.WithConcurrency(sdk.Concurrency[RefundReq]{Key: key, Policy: "drop-oldest"}),
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, sdk.ErrInvalidWorkflow) {
					t.Fatalf("panic %v, want an error wrapping ErrInvalidWorkflow", err)
				}
			}()
			sdk.NewWorkflow("bad", fn, opt)
		})
	}
}

func TestWithConcurrency_Defaults(t *testing.T) {
	wf := sdk.NewWorkflow("defaults", func(ctx context.Context, in RefundReq) (string, error) { return "", nil },
		sdk.WithConcurrency(sdk.Concurrency[RefundReq]{Key: func(in RefundReq) string { return in.Order }}))
	limit, pol, ok := wf.ConcurrencyLimit()
	if limit != 1 || pol != sdk.ConcurrencyQueue || !ok {
		t.Fatalf("ConcurrencyLimit = %d, %q, %v; want 1, queue, true", limit, pol, ok)
	}
	k, err := wf.ConcurrencyKey([]byte(`{"Order":"B-2"}`))
	if k != "B-2" || err != nil {
		t.Fatalf("ConcurrencyKey = %q, %v", k, err)
	}
	if _, err := wf.ConcurrencyKey([]byte(`[1]`)); err == nil {
		t.Fatal("an input that does not decode gave a key")
	}
	if _, _, ok := Fulfil.ConcurrencyLimit(); ok {
		t.Fatal("a workflow without WithConcurrency reports a key")
	}
}
