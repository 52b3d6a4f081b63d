package sdk_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/sdk"
)

// NewClient returns the configuration error itself, and no client, without
// sending anything to the database.
func TestNewClient_ReturnsTheConfigurationError(t *testing.T) {
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	direct, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	before := pool.Stat().AcquireCount()
	for _, tc := range []struct {
		name string
		pool *pgxpool.Pool
		opts []sdk.ClientOption
		want string
	}{
		{"invalid schema", pool, []sdk.ClientOption{sdk.WithSchema("Bad-Name")}, `invalid schema name "Bad-Name"`},
		{"nil pool", nil, nil, "nil pool"},
		{"non-positive poll interval", pool, []sdk.ClientOption{sdk.WithPollInterval(0)}, "must be positive"},
		{"non-positive max payload", pool, []sdk.ClientOption{sdk.WithMaxPayload(-1)}, "must be positive"},
		{"non-positive statement timeout", pool, []sdk.ClientOption{sdk.WithStatementTimeout(0)}, "must be positive"},
		{"poll only and listen config", pool, []sdk.ClientOption{sdk.WithPollOnly(), sdk.WithListenConfig(direct)}, "exclusive"},
		{"nil logger", pool, []sdk.ClientOption{sdk.WithLogger(nil)}, "nil logger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := sdk.NewClient(tc.pool, tc.opts...)
			if c != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewClient: %v, %v; want no client and the configuration error (%q)", c, err, tc.want)
			}
		})
	}
	if n := pool.Stat().AcquireCount() - before; n != 0 {
		t.Fatalf("misconfigured clients acquired %d connections, want none", n)
	}
}

// Every call on a nil *Client (a NewClient whose error was ignored) returns
// an error instead of panicking, and Close does nothing.
func TestClient_NilClientReturnsAnErrorFromEveryCall(t *testing.T) {
	ctx := t.Context()
	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	var c *sdk.Client
	one := []sdk.StartParams[OrderIn]{{Input: OrderIn{ID: "a"}}}
	for _, call := range []struct {
		name string
		call func() error
	}{
		{"Start", func() error { _, err := sdk.Start(ctx, c, Fulfil, OrderIn{}); return err }},
		{"StartTx", func() error { _, err := sdk.StartTx(ctx, c, tx, Fulfil, OrderIn{}); return err }},
		{"StartMany", func() error { _, err := sdk.StartMany(ctx, c, Fulfil, one); return err }},
		{"StartMany empty", func() error { _, err := sdk.StartMany(ctx, c, Fulfil, nil); return err }},
		{"StartManyTx", func() error { _, err := sdk.StartManyTx(ctx, c, tx, Fulfil, one); return err }},
		{"Lookup", func() error { _, err := sdk.Lookup(ctx, c, Fulfil, uuid.New()); return err }},
		{"Cancel", func() error { return c.Cancel(ctx, uuid.New()) }},
	} {
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s panicked: %v", call.name, p)
				}
			}()
			err = call.call()
		}()
		if err == nil || !strings.Contains(err.Error(), "nil *Client") {
			t.Errorf("%s: %v, want the nil client's error", call.name, err)
		}
	}
	c.Close()
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
