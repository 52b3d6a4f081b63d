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

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/pgtest"
	internalstore "github.com/tenurehq/tenure/internal/store"
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
// serves the checkout and payout workflows, a client, and the operator the
// UI reads through. Its card processor rejects one currency until the test
// deploys the fix; its bank can fall silent while a payment is made.
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

	// payout pays a supplier through pay-supplier, an at-most-once
	// activity: paying twice is the bug to avoid. While bankSilent is set,
	// each of its attempts says so on paying and then waits for the bank's
	// answer until the run's lease is lost (see cutOff).
	payout *sdk.Workflow[payment, string]
	// refund waits for the signal "approved" with no timeout; nightly
	// sleeps six hours; credit's bureau answers 503 and its retry waits ten
	// minutes, suspended (queued, due then): runs that wait, each for
	// something else.
	refund  *sdk.Workflow[string, string]
	nightly *sdk.Workflow[string, string]
	credit  *sdk.Workflow[string, string]

	bankSilent atomic.Bool
	paying     chan string // the payment IDs of attempts that wait
	bankMu     sync.Mutex
	bankCalls  map[string]int // pay-supplier's calls, by payment ID
	internal   *internalstore.Store
}

// payment is the input of the shop's payout.
type payment struct {
	ID       string
	Supplier string
	Amount   int
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
	s.paying, s.bankCalls = make(chan string, 16), map[string]int{}
	paySupplier := activities.New("pay-supplier", func(ctx context.Context, p payment) (string, error) {
		s.bankMu.Lock()
		s.bankCalls[p.ID]++
		s.bankMu.Unlock()
		if s.bankSilent.Load() {
			select {
			case s.paying <- p.ID:
			default: // nobody waits for it: the test has enough
			}
			<-ctx.Done()
			return "", ctx.Err()
		}
		return fmt.Sprintf("paid %d to %s", p.Amount, p.Supplier), nil
	}, policy.AtMostOnce())
	s.payout = sdk.NewWorkflow("payout", func(ctx context.Context, p payment) (string, error) {
		return sdk.Execute(ctx, paySupplier, p)
	})
	s.refund = sdk.NewWorkflow("approve-refund", func(ctx context.Context, id string) (string, error) {
		return sdk.Receive[string](ctx, "approved", 0)
	})
	s.nightly = sdk.NewWorkflow("nightly-report", func(ctx context.Context, day string) (string, error) {
		if err := sdk.Sleep(ctx, 6*time.Hour); err != nil {
			return "", err
		}
		return "report of " + day, nil
	})
	bureau := activities.New("credit-bureau", func(ctx context.Context, customer string) (string, error) {
		return "", errors.New("credit bureau: 503 Service Unavailable")
	}, policy.MaxAttempts(3), policy.Constant(10*time.Minute), policy.Jitter(policy.NoJitter))
	s.credit = sdk.NewWorkflow("check-credit", func(ctx context.Context, customer string) (string, error) {
		return sdk.Execute(ctx, bureau, customer)
	})
	if s.internal, err = internalstore.New(pool, internalstore.WithSchema(s.schema)); err != nil {
		t.Fatal(err)
	}

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
	if err := s.worker.Register(s.checkout, s.payout, s.refund, s.nightly, s.credit); err != nil {
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

// cutOff does to the run what a worker cut off from PostgreSQL in the middle
// of an attempt suffers: its lease ends at once, so the shop's worker
// reclaims the run, finds the attempt lost and, for an at-most-once
// activity, fails the run indeterminate.
func (s *shop) cutOff(runID uuid.UUID) {
	s.t.Helper()
	if err := s.internal.ExpireLease(s.t.Context(), runID); err != nil {
		s.t.Fatalf("cut off run %s: %v", runID, err)
	}
}

// calls is how many times pay-supplier was invoked for payment id.
func (s *shop) calls(id string) int {
	s.bankMu.Lock()
	defer s.bankMu.Unlock()
	return s.bankCalls[id]
}
