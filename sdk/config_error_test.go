package sdk_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/sdk"
)

// A client made with a bad configuration returns the configuration error from
// every call, panics in none, and sends nothing to the database.
func TestClient_ConfigurationErrorIsReturnedByEveryCall(t *testing.T) {
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// A transaction for StartTx and StartManyTx, begun before the counting starts.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })

	clients := []struct {
		name   string
		client func() *sdk.Client
		want   string // in every call's error
	}{
		{"invalid schema", func() *sdk.Client { return sdk.NewClient(pool, sdk.WithSchema("Bad-Name")) }, `invalid schema name "Bad-Name"`},
		{"nil pool", func() *sdk.Client { return sdk.NewClient(nil) }, "nil pool"},
		{"non-positive poll interval", func() *sdk.Client { return sdk.NewClient(pool, sdk.WithPollInterval(0)) }, "must be positive"},
		{"non-positive max payload", func() *sdk.Client { return sdk.NewClient(pool, sdk.WithMaxPayload(-1)) }, "must be positive"},
		{"non-positive statement timeout", func() *sdk.Client { return sdk.NewClient(pool, sdk.WithStatementTimeout(0)) }, "must be positive"},
		{"nil client", func() *sdk.Client { return nil }, "nil *Client"},
	}
	one := []sdk.StartParams[OrderIn]{{Input: OrderIn{ID: "a"}}}
	calls := []struct {
		name string
		call func(c *sdk.Client) error
	}{
		{"Start", func(c *sdk.Client) error { _, err := sdk.Start(ctx, c, Fulfil, OrderIn{}); return err }},
		{"Start with key", func(c *sdk.Client) error {
			_, err := sdk.Start(ctx, c, Fulfil, OrderIn{}, sdk.WithKey("k"))
			return err
		}},
		{"StartTx", func(c *sdk.Client) error { _, err := sdk.StartTx(ctx, c, tx, Fulfil, OrderIn{}); return err }},
		{"StartMany", func(c *sdk.Client) error { _, err := sdk.StartMany(ctx, c, Fulfil, one); return err }},
		{"StartMany empty", func(c *sdk.Client) error { _, err := sdk.StartMany(ctx, c, Fulfil, nil); return err }},
		{"StartManyTx", func(c *sdk.Client) error { _, err := sdk.StartManyTx(ctx, c, tx, Fulfil, one); return err }},
		{"Lookup", func(c *sdk.Client) error { _, err := sdk.Lookup(ctx, c, Fulfil, uuid.New()); return err }},
		{"Cancel", func(c *sdk.Client) error { return c.Cancel(ctx, uuid.New()) }},
		{"Requeue", func(c *sdk.Client) error { return c.Requeue(ctx, uuid.New()) }},
		{"History", func(c *sdk.Client) error { _, err := c.History(ctx, uuid.New()); return err }},
		{"Failures", func(c *sdk.Client) error { _, err := c.Failures(ctx, sdk.FailureFilter{}); return err }},
	}
	before := pool.Stat().AcquireCount()
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			c := cl.client()
			defer c.Close()
			for _, call := range calls {
				var err error
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("%s panicked: %v", call.name, p)
						}
					}()
					err = call.call(c)
				}()
				if err == nil || !strings.Contains(err.Error(), cl.want) {
					t.Errorf("%s: %v, want the configuration error (%q)", call.name, err, cl.want)
				}
			}
			c.Close()
			c.Close() // twice does nothing
		})
	}
	if n := pool.Stat().AcquireCount() - before; n != 0 {
		t.Fatalf("misconfigured clients acquired %d connections, want none", n)
	}
}

// Result on a handle that no Start or Lookup made returns an error instead of
// panicking.
func TestRun_ResultOnAZeroHandleIsAnError(t *testing.T) {
	var r sdk.Run[string]
	if _, err := r.Result(t.Context()); err == nil {
		t.Fatal("Result on a zero Run: nil error")
	}
	var nilRun *sdk.Run[string]
	if _, err := nilRun.Result(t.Context()); err == nil {
		t.Fatal("Result on a nil Run: nil error")
	}
}
