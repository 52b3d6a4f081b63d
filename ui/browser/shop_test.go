package browser_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// order is the input of the shop's checkout.
type order struct {
	ID       string
	Amount   int
	Currency string
}

// shop is one test's Tenure: a migrated schema of its own, a worker that
// serves the checkout workflow, a client, and the operator the UI reads
// through. Its card processor rejects one currency until the test deploys
// the fix.
type shop struct {
	t      *testing.T
	pool   *pgxpool.Pool
	schema string
	client *sdk.Client
	op     *operator.Operator
	worker *runtime.Worker

	// fixed is the fix of the card processor's bug: until it is deployed,
	// charging an order in XTS fails, and retrying cannot help.
	fixed atomic.Bool

	checkout *sdk.Workflow[order, string]
	// reconcile is a workflow that no worker of the shop registers: its
	// runs wait in the queue for ever, which the UI must point out.
	reconcile *sdk.Workflow[string, string]
}

// discard is the logger of the shop's worker and client: a test's output is
// its failures.
var discard = slog.New(slog.DiscardHandler)

// newShop migrates a schema and starts the shop's worker and client; all
// of it is shut down when the test ends.
func newShop(t *testing.T) *shop {
	t.Helper()
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := &shop{t: t, pool: pool, schema: pgtest.Schema(t)}
	if err := store.Migrate(ctx, pool, store.WithSchema(s.schema)); err != nil {
		t.Fatal(err)
	}

	// The warehouse's first answer for each order is a timeout, so that
	// every run's timeline shows a retry as well.
	var mu sync.Mutex
	reserved := map[string]bool{}
	reserveStock := activities.New("reserve-stock", func(ctx context.Context, o order) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if !reserved[o.ID] {
			reserved[o.ID] = true
			return "", errors.New("warehouse: timeout after 2s")
		}
		return "reservation for " + o.ID, nil
	}, policy.MaxAttempts(3), policy.Constant(50*time.Millisecond), policy.Jitter(policy.NoJitter))
	chargeCard := activities.New("charge-card", func(ctx context.Context, o order) (string, error) {
		if o.Currency == "XTS" && !s.fixed.Load() {
			return "", policy.Permanent(fmt.Errorf("card processor: unknown currency %q", o.Currency))
		}
		if o.Amount <= 0 {
			return "", policy.Permanent(fmt.Errorf("card processor: amount %d must be positive", o.Amount))
		}
		return fmt.Sprintf("charged %d %s", o.Amount, o.Currency), nil
	}, policy.MaxAttempts(5), policy.Exponential(100*time.Millisecond, 2, 5*time.Second))
	sendReceipt := activities.New("send-receipt", func(ctx context.Context, charge string) (string, error) {
		return "receipt: " + charge, nil
	})
	s.checkout = sdk.NewWorkflow("checkout", func(ctx context.Context, o order) (string, error) {
		if _, err := sdk.Execute(ctx, reserveStock, o); err != nil {
			return "", err
		}
		charge, err := sdk.Execute(ctx, chargeCard, o)
		if err != nil {
			return "", err
		}
		return sdk.Execute(ctx, sendReceipt, charge)
	})
	s.reconcile = sdk.NewWorkflow("reconcile-ledger", func(ctx context.Context, day string) (string, error) {
		return "reconciled " + day, nil
	})

	s.worker, err = runtime.NewWorker(pool, runtime.Config{
		Schema:            s.schema,
		Label:             "checkout-worker-1",
		LeaseTTL:          5 * time.Second,
		HeartbeatInterval: time.Second,
		PollInterval:      20 * time.Millisecond,
		Logger:            discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.worker.Register(s.checkout); err != nil {
		t.Fatal(err)
	}
	if err := s.worker.Start(context.WithoutCancel(ctx)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.worker.Shutdown(ctx); err != nil {
			t.Errorf("worker: Shutdown: %v", err)
		}
	})
	s.client, err = sdk.NewClient(pool, sdk.WithSchema(s.schema), sdk.WithPollInterval(50*time.Millisecond),
		sdk.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.client.Close)
	s.op, err = operator.New(pool, operator.WithSchema(s.schema))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// order starts a checkout of o under the key o.ID and waits for its end,
// returning the run and the error it ended with.
func (s *shop) order(o order) (*sdk.Run[string], error) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
	defer cancel()
	run, err := sdk.Start(ctx, s.client, s.checkout, o, sdk.WithKey(o.ID))
	if err != nil {
		s.t.Fatalf("start checkout of %s: %v", o.ID, err)
	}
	_, err = run.Result(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		s.t.Fatalf("checkout of %s: no result in 30s", o.ID)
	}
	return run, err
}
