package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/tenuretest"
)

func TestMain(m *testing.M) {
	if os.Getenv(exampledb.ProgramEnv) != "" { // exampledb.RunProgram runs the program
		main()
		os.Exit(0)
	}
	code := tenuretest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The program as go run runs it without DATABASE_URL: on a private cluster
// of its own, saying so on its first line, with nothing on stderr (no
// warning that no worker serves a run it starts).
func TestOrders_RunsQuietlyAsGoRunRunsIt(t *testing.T) {
	t.Parallel()
	out := exampledb.RunProgram(t, 3*time.Minute)
	for _, want := range []string{
		"Reconciled:true",
		"charge calls the provider saw for A-102: 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the program's output lacks %q:\n%s", want, out)
		}
	}
}

// charge and recordOrder name two of the activities that newPlaceOrder
// declares (inside it, bound to their dependencies) for Override and
// OverrideTx: the kit replaces an activity's function by the activity's
// name, and the workflow's activity keeps the rest, so charge stays at most
// once and record-order keeps its transaction.
var (
	charge = activities.New("charge", func(context.Context, Order) (Payment, error) {
		return Payment{}, errors.New("a name for Override: never run")
	})
	recordOrder = activities.NewTx("record-order", func(context.Context, pgx.Tx, Payment) (Receipt, error) {
		return Receipt{}, errors.New("a name for OverrideTx: never run")
	})
)

// shop is the example's workflow on a fake payment provider and mail relay,
// with its orders table, in an env of the test's own.
type shop struct {
	*tenuretest.Env
	pay        *provider
	mail       *mailer
	placeOrder *sdk.Workflow[Order, Confirmation]
}

// newShop runs the workflow on pay; the table is shop_orders without a
// schema: the env's schema is first on its pool's search_path.
func newShop(t *testing.T, pay *provider, opts ...tenuretest.Option) *shop {
	t.Helper()
	s := &shop{pay: pay, mail: &mailer{seen: map[string]bool{}}}
	s.placeOrder = newPlaceOrder(s.pay, s.mail, "shop_orders")
	s.Env = tenuretest.New(t, append([]tenuretest.Option{tenuretest.Workflows(s.placeOrder)}, opts...)...)
	if _, err := s.Pool.Exec(t.Context(), `CREATE TABLE shop_orders (
		order_id text PRIMARY KEY, payment_id text NOT NULL, amount_cents int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return s
}

// check fails the test unless the orders table holds want ("order payment")
// and the relay sent confirmations to mailedTo.
func (s *shop) check(t *testing.T, want []string, mailedTo ...string) {
	t.Helper()
	rows, _ := s.Pool.Query(t.Context(), `SELECT order_id || ' ' || payment_id FROM shop_orders ORDER BY 1`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("orders %v, %v; want %v", got, err, want)
	}
	s.mail.mu.Lock()
	defer s.mail.mu.Unlock()
	if !slices.Equal(s.mail.sent, mailedTo) {
		t.Errorf("confirmations sent to %v, want %v", s.mail.sent, mailedTo)
	}
}

// timeline fails the test unless the run's attempts are want.
func (s *shop) timeline(t *testing.T, run *sdk.Run[Confirmation], want ...string) {
	t.Helper()
	if got := s.Timeline(run.ID); !slices.Equal(got, want) {
		t.Errorf("attempts %v, want %v", got, want)
	}
}

// await waits for an activity of the env's worker to close ch.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker never %s", what)
	}
}

// The program as go run runs it, in a schema of the kit's: worker A is
// really cut off from PostgreSQL after the provider took a charge, and
// worker B takes the run over when A's lease expires.
func TestOrders_PaymentIsTakenAtMostOnceAndReconciled(t *testing.T) {
	t.Parallel()
	env := tenuretest.New(t) // a schema of the test's own (run recreates it), dropped after the test
	var out bytes.Buffer
	o, err := run(t.Context(), &out, tenuretest.URL(t), env.Schema)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	if o.happyErr != nil {
		t.Errorf("happy order: %v", o.happyErr)
	}
	if f := env.RequireFailed(o.declined.ID, sdk.ReasonNonRetryable); f.Activity != "charge" {
		t.Errorf("declined order: %+v, want a failure of charge", f)
	}
	if o.cutErr != nil || o.chargeCallsForCutOff != 1 {
		t.Errorf("cut-off order: %v after %d charge calls; want success after exactly one", o.cutErr, o.chargeCallsForCutOff)
	}
	if tl := env.Timeline(o.cutOff.ID); len(tl) < 2 || tl[0] != "1.1 charge lost" || tl[1] != "2.1 find-payment succeeded" {
		t.Errorf("cut-off order's attempts %v", tl)
	}
	if !slices.Equal(o.confirmations, []string{"ada@example.com", "cy@example.com"}) {
		t.Errorf("confirmations sent to %v", o.confirmations)
	}
	for _, want := range []string{
		"Reconciled:true",
		"1    1       charge             lost       worker-a", // the attempt whose outcome nobody knows
		"2    1       find-payment       succeeded  worker-b",
		"record-order       succeeded",
		"send-confirmation  failed", "(jitter)", // the 421, retried after a full-jitter delay
		"open_failures", "go -C cmd/tenure run . --schema",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(got)
	}
}

func TestOrders_AnOrderIsChargedRecordedAndConfirmed(t *testing.T) {
	t.Parallel()
	s := newShop(t, newProvider())
	run := tenuretest.Start(s.Env, s.placeOrder, Order{ID: "A-100", Email: "ada@example.com", AmountCents: 4200})
	if c, err := tenuretest.Result(s.Env, run); err != nil || c.PaymentID != "pay_1" || c.Reconciled {
		t.Fatalf("Result = %+v, %v", c, err)
	}
	s.timeline(t, run, "1.1 charge succeeded", "2.1 record-order succeeded",
		"3.1 send-confirmation failed", "3.2 send-confirmation succeeded")
	if h := s.History(run.ID); len(h) == 4 && h[2].DelaySource != "jitter" {
		t.Errorf("the relay's 421 was retried after a delay from %q, want full jitter", h[2].DelaySource)
	}
	s.check(t, []string{"A-100 pay_1"}, "ada@example.com")
}

func TestOrders_ADeclinedCardFailsTheRunAtOnce(t *testing.T) {
	t.Parallel()
	s := newShop(t, newProvider())
	run := tenuretest.Start(s.Env, s.placeOrder, Order{ID: "A-101", Email: "bob@example.com", AmountCents: 250_000})
	f := s.RequireFailed(run.ID, sdk.ReasonNonRetryable)
	if f.Activity != "charge" || f.Attempts != 1 || !strings.Contains(f.ErrorMessage, ErrDeclined.Error()) {
		t.Errorf("failure %+v, want charge declined after one attempt", f)
	}
	s.check(t, nil)
}

// The worker dies after the provider took the charge: the attempt is lost,
// charge is at most once, so the workflow gets sdk.ErrIndeterminate and
// finds the payment instead of charging again.
func TestOrders_ACrashAfterTheChargeIsReconciled(t *testing.T) {
	t.Parallel()
	s := newShop(t, newProvider())
	taken, resume := make(chan struct{}), make(chan struct{})
	s.pay.mu.Lock()
	s.pay.onTaken = func(Payment) { close(taken); <-resume }
	s.pay.mu.Unlock()

	run := tenuretest.Start(s.Env, s.placeOrder, Order{ID: "A-102", Email: "cy@example.com", AmountCents: 1999})
	await(t, taken, "charged order A-102")
	s.Crash(run.ID)
	close(resume) // what the crashed attempt returns now is discarded

	if c, err := tenuretest.Result(s.Env, run); err != nil || !c.Reconciled || c.PaymentID != "pay_1" {
		t.Fatalf("Result = %+v, %v; want the payment found by reconciliation", c, err)
	}
	if n := s.pay.Calls("A-102"); n != 1 {
		t.Errorf("%d charge calls, want exactly one", n)
	}
	s.timeline(t, run, "1.1 charge lost", "2.1 find-payment succeeded", "3.1 record-order succeeded",
		"4.1 send-confirmation failed", "4.2 send-confirmation succeeded")
	s.check(t, []string{"A-102 pay_1"}, "cy@example.com")
}

// The worker dies before the charge reached the provider: reconciliation
// finds no payment, so charging again (a new step, a new key) is safe.
func TestOrders_ACrashBeforeTheChargeChargesOnceMore(t *testing.T) {
	t.Parallel()
	pay := newProvider()
	charging := make(chan struct{})
	var calls atomic.Int32
	s := newShop(t, pay, tenuretest.Override(charge, func(ctx context.Context, o Order) (Payment, error) {
		if calls.Add(1) == 1 {
			close(charging)
			<-ctx.Done() // the worker "dies" here
			return Payment{}, ctx.Err()
		}
		return pay.Charge(activities.IdempotencyKey(ctx), o)
	}))

	run := tenuretest.Start(s.Env, s.placeOrder, Order{ID: "A-103", Email: "di@example.com", AmountCents: 500})
	await(t, charging, "started to charge order A-103")
	s.Crash(run.ID)

	if c, err := tenuretest.Result(s.Env, run); err != nil || c.Reconciled || c.PaymentID != "pay_1" {
		t.Fatalf("Result = %+v, %v; want a second charge", c, err)
	}
	if n := pay.Calls("A-103"); n != 1 {
		t.Errorf("the provider saw %d charges, want one", n)
	}
	s.timeline(t, run, "1.1 charge lost", "2.1 find-payment succeeded", "3.1 charge succeeded", "4.1 record-order succeeded",
		"5.1 send-confirmation failed", "5.2 send-confirmation succeeded")
	s.check(t, []string{"A-103 pay_1"}, "di@example.com")
}

// The order row commits with record-order's checkpoint: a worker that dies
// after the insert leaves no row, and the rescue writes it once.
func TestOrders_TheOrderIsRecordedExactlyOnceAcrossACrash(t *testing.T) {
	t.Parallel()
	recording := make(chan struct{})
	var calls atomic.Int32
	s := newShop(t, newProvider(), tenuretest.OverrideTx(recordOrder, func(ctx context.Context, tx pgx.Tx, p Payment) (Receipt, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO shop_orders (order_id, payment_id, amount_cents) VALUES ($1, $2, $3)`,
			p.OrderID, p.ID, p.AmountCents); err != nil {
			return Receipt{}, err
		}
		if calls.Add(1) == 1 {
			close(recording)
			<-ctx.Done() // the worker "dies" with the row inserted, before the checkpoint
			return Receipt{}, ctx.Err()
		}
		return Receipt{OrderID: p.OrderID}, nil
	}))

	run := tenuretest.Start(s.Env, s.placeOrder, Order{ID: "A-104", Email: "ed@example.com", AmountCents: 700})
	await(t, recording, "recorded order A-104")
	s.Crash(run.ID)

	if _, err := tenuretest.Result(s.Env, run); err != nil {
		t.Fatal(err)
	}
	s.timeline(t, run, "1.1 charge succeeded", "2.1 record-order lost", "2.2 record-order succeeded rescue",
		"3.1 send-confirmation failed", "3.2 send-confirmation succeeded")
	s.check(t, []string{"A-104 pay_1"}, "ed@example.com")
}
