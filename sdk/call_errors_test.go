package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// A call refusing its arguments names itself, not another entry point that
// shares the check: StartTx's nil workflow is StartTx's error, not Start's.
func TestCalls_NameThemselvesInTheErrorsOfTheirArguments(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithMaxPayload(64))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	var none *sdk.Workflow[OrderIn, string]
	one := []sdk.StartParams[OrderIn]{{Input: OrderIn{ID: "a"}}}
	run, big := uuid.New(), strings.Repeat("x", 100)
	for _, tc := range []struct {
		want string // the error's beginning
		call func() error
	}{
		{"sdk.Start: nil workflow", func() error { _, err := sdk.Start(ctx, c, none, OrderIn{}); return err }},
		{"sdk.StartTx: nil workflow", func() error { _, err := sdk.StartTx(ctx, c, tx, none, OrderIn{}); return err }},
		{"sdk.StartMany: nil workflow", func() error { _, err := sdk.StartMany(ctx, c, none, one); return err }},
		{"sdk.StartManyTx: nil workflow", func() error { _, err := sdk.StartManyTx(ctx, c, tx, none, one); return err }},

		{"sdk.Send: empty signal name", func() error { return c.Send(ctx, run, "", nil) }},
		{"sdk.SendTx: empty signal name", func() error { return c.SendTx(ctx, tx, run, "", nil) }},
		{`sdk.Send("go"): encode payload`, func() error { return c.Send(ctx, run, "go", make(chan int)) }},
		{`sdk.SendTx("go"): encode payload`, func() error { return c.SendTx(ctx, tx, run, "go", make(chan int)) }},
		{`sdk.Send("go"): payload is 102 bytes`, func() error { return c.Send(ctx, run, "go", big) }},
		{`sdk.SendTx("go"): payload is 102 bytes`, func() error { return c.SendTx(ctx, tx, run, "go", big) }},
	} {
		if err := tc.call(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v, want an error beginning %q", err, tc.want)
		}
	}
}

// Outside a workflow run, each call of a workflow names itself, and its error
// wraps ErrNotInWorkflow.
func TestCalls_OutsideAWorkflowNameThemselves(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"sdk.Execute", func() error { _, err := sdk.Execute(ctx, Reserve, OrderIn{}); return err }},
		{"sdk.Sleep", func() error { return sdk.Sleep(ctx, time.Second) }},
		{"sdk.SleepUntil", func() error { return sdk.SleepUntil(ctx, time.Now()) }},
		{"sdk.Receive", func() error { _, err := sdk.Receive[int](ctx, "go", 0); return err }},
		{"sdk.SetEvent", func() error { return sdk.SetEvent(ctx, "k", 1) }},
		{"sdk.Now", func() error { _, err := sdk.Now(ctx); return err }},
		{"sdk.SideEffect", func() error {
			_, err := sdk.SideEffect(ctx, func() (int, error) { return 1, nil })
			return err
		}},
		{"sdk.StartChild", func() error { _, err := sdk.StartChild(ctx, Fulfil, OrderIn{}); return err }},
	} {
		err := tc.call()
		if want := tc.name + ": called outside a workflow run"; err == nil || err.Error() != want || !errors.Is(err, sdk.ErrNotInWorkflow) {
			t.Errorf("%s: %v, want %q wrapping ErrNotInWorkflow", tc.name, err, want)
		}
	}
}
