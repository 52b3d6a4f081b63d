// Command orders is order fulfilment on Tenure: an at-most-once payment with
// an idempotency key, the order recorded in the same transaction as its
// checkpoint, a confirmation e-mail retried with full jitter, and the path a
// workflow takes when a payment is indeterminate (the worker lost its
// database connection right after the payment provider took the charge).
//
//	go run ./examples/workflows/orders
//
// It uses DATABASE_URL when set, in the schema tenure_orders (recreated on
// every run and left behind for you to query), and otherwise a private
// throwaway PostgreSQL cluster started from the binaries on PATH.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/devdb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// defaultSchema keeps the example's tables apart from a real Tenure schema.
const defaultSchema = "tenure_orders"

// Order is the input of the place-order workflow.
type Order struct {
	ID          string
	Email       string
	AmountCents int
}

// Payment is what the payment provider returns for a charge.
type Payment struct {
	ID          string
	OrderID     string
	AmountCents int
}

// Confirmation is the workflow's output.
type Confirmation struct {
	OrderID    string
	PaymentID  string
	Reconciled bool // the payment was indeterminate and found by reconciliation
}

// ErrDeclined is the provider refusing a card: retrying cannot help.
var ErrDeclined = errors.New("card declined")

// provider is a fake payment provider. Like real ones it deduplicates
// charges by idempotency key and can be searched by order.
type provider struct {
	mu      sync.Mutex
	byKey   map[string]Payment
	calls   map[string]int // charge calls per order
	onTaken func(Payment)  // called after a charge is taken (the example cuts a network here)
}

func newProvider() *provider {
	return &provider{byKey: map[string]Payment{}, calls: map[string]int{}}
}

// Charge takes a payment once per idempotency key.
func (p *provider) Charge(key string, o Order) (Payment, error) {
	p.mu.Lock()
	p.calls[o.ID]++
	if pay, ok := p.byKey[key]; ok {
		p.mu.Unlock()
		return pay, nil
	}
	if o.AmountCents > 100_000 {
		p.mu.Unlock()
		return Payment{}, fmt.Errorf("charge order %s: %w", o.ID, ErrDeclined)
	}
	pay := Payment{ID: fmt.Sprintf("pay_%d", len(p.byKey)+1), OrderID: o.ID, AmountCents: o.AmountCents}
	p.byKey[key] = pay
	hook := p.onTaken
	p.mu.Unlock()
	if hook != nil {
		hook(pay)
	}
	return pay, nil
}

// FindByOrder searches the payments taken for an order.
func (p *provider) FindByOrder(orderID string) (Payment, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pay := range p.byKey {
		if pay.OrderID == orderID {
			return pay, true
		}
	}
	return Payment{}, false
}

// Calls counts the charge calls made for an order, retries included.
func (p *provider) Calls(orderID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[orderID]
}

// mailer is a fake SMTP relay that asks every message to be retried once.
type mailer struct {
	mu   sync.Mutex
	seen map[string]bool
	sent []string
}

func (m *mailer) Send(to, body string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.seen[to+body] {
		m.seen[to+body] = true
		return errors.New("smtp: 421 service not available, try again later")
	}
	m.sent = append(m.sent, to)
	return nil
}

// Lookup is what reconciliation found.
type Lookup struct {
	Found   bool
	Payment Payment
}

// Receipt is what record-order returns.
type Receipt struct{ OrderID string }

// newPlaceOrder declares the activities and the workflow, bound to their
// dependencies (the provider, the mailer and the orders table).
func newPlaceOrder(pay *provider, mail *mailer, ordersTable string) *sdk.Workflow[Order, Confirmation] {
	// The payment must never be taken twice: AtMostOnce means an attempt
	// whose outcome is unknown is not run again. Retries after an error the
	// provider returned are fine: the idempotency key makes them safe.
	charge := activities.New("charge",
		func(ctx context.Context, o Order) (Payment, error) {
			pay, err := pay.Charge(activities.IdempotencyKey(ctx), o)
			if errors.Is(err, ErrDeclined) {
				return Payment{}, policy.Permanent(err)
			}
			return pay, err
		},
		policy.AtMostOnce(),
		policy.MaxAttempts(3),
		policy.Exponential(100*time.Millisecond, 2, time.Second),
	)
	// Reconciliation asks the provider instead of charging again.
	findPayment := activities.New("find-payment",
		func(ctx context.Context, orderID string) (Lookup, error) {
			p, ok := pay.FindByOrder(orderID)
			return Lookup{Found: ok, Payment: p}, nil
		})
	// The order row commits in the same transaction as the step's
	// checkpoint: exactly once, even if the worker dies around it.
	recordOrder := activities.NewTx("record-order",
		func(ctx context.Context, tx pgx.Tx, p Payment) (Receipt, error) {
			_, err := tx.Exec(ctx, `INSERT INTO `+ordersTable+` (order_id, payment_id, amount_cents) VALUES ($1, $2, $3)`,
				p.OrderID, p.ID, p.AmountCents)
			return Receipt{OrderID: p.OrderID}, err
		})
	// E-mail is at least once; full jitter spreads the retries of many
	// workflows hitting the same relay.
	sendConfirmation := activities.New("send-confirmation",
		func(ctx context.Context, o Order) (bool, error) {
			return true, mail.Send(o.Email, "order "+o.ID+" confirmed")
		},
		policy.MaxAttempts(5),
		policy.Exponential(200*time.Millisecond, 2, 5*time.Second),
		policy.Jitter(policy.FullJitter),
	)

	return sdk.NewWorkflow("place-order", func(ctx context.Context, o Order) (Confirmation, error) {
		c := Confirmation{OrderID: o.ID}
		p, err := sdk.Execute(ctx, charge, o)
		if errors.Is(err, sdk.ErrIndeterminate) {
			// The charge attempt was lost: nobody knows whether the
			// provider took it. Ask it rather than charge twice.
			found, err := sdk.Execute(ctx, findPayment, o.ID)
			if err != nil {
				return c, err
			}
			if !found.Found {
				// Not taken: charging again (a new step, a new key) is safe.
				if p, err = sdk.Execute(ctx, charge, o); err != nil {
					return c, err
				}
			} else {
				p, c.Reconciled = found.Payment, true
			}
		} else if err != nil {
			return c, err
		}
		c.PaymentID = p.ID
		if _, err := sdk.Execute(ctx, recordOrder, p); err != nil {
			return c, err
		}
		if _, err := sdk.Execute(ctx, sendConfirmation, o); err != nil {
			return c, err
		}
		return c, nil
	})
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := mainErr(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

func mainErr(ctx context.Context, out io.Writer) error {
	db, err := devdb.Open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Fprintf(out, "schema %s in %s\n", defaultSchema, db)
	_, err = run(ctx, out, db.URL, defaultSchema)
	return err
}

// outcome is what the example did, for its test.
type outcome struct {
	happy, cutOff, declined  *sdk.Run[Confirmation]
	chargeCallsForCutOff     int
	confirmations            []string
	happyErr, cutErr, decErr error
}

// run places three orders in schema, which it recreates, and prints what
// happened and how to look at it.
func run(ctx context.Context, out io.Writer, url, schema string) (*outcome, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE"); err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		return nil, err
	}
	// The application's own table, next to Tenure's for the example's sake.
	ordersTable := ident + ".shop_orders"
	if _, err := pool.Exec(ctx, `CREATE TABLE `+ordersTable+` (
		order_id text PRIMARY KEY, payment_id text NOT NULL, amount_cents int NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, err
	}

	pay, mail := newProvider(), &mailer{seen: map[string]bool{}}
	placeOrder := newPlaceOrder(pay, mail, ordersTable)
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithPollInterval(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	op, err := operator.New(pool, operator.WithSchema(schema)) // reads the attempts table
	if err != nil {
		return nil, err
	}

	// Worker A reaches the database through a network we can cut.
	net := &cuttableNetwork{}
	cfgA, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfgA.ConnConfig.DialFunc = net.dial
	poolA, err := pgxpool.NewWithConfig(ctx, cfgA)
	if err != nil {
		return nil, err
	}
	defer poolA.Close()
	stopA, err := startWorker(ctx, poolA, schema, "worker-a", placeOrder)
	if err != nil {
		return nil, err
	}
	defer stopA()

	o := &outcome{}
	fmt.Fprintln(out, "\n== 1. An order that goes through ==")
	fmt.Fprintln(out, "charge (at most once, idempotency key), record-order (in the checkpoint's transaction),")
	fmt.Fprintln(out, "send-confirmation (the relay says 421 once: retried after a full-jitter delay)")
	o.happy, err = sdk.Start(ctx, client, placeOrder, Order{ID: "A-100", Email: "ada@example.com", AmountCents: 4200})
	if err != nil {
		return nil, err
	}
	c, err := o.happy.Result(ctx)
	o.happyErr = err
	fmt.Fprintf(out, "result: %+v, err: %v\n", c, err)
	if err := printHistory(ctx, out, op, o.happy); err != nil {
		return nil, err
	}

	fmt.Fprintln(out, "\n== 2. A declined card: a permanent error, no retry, a failure row ==")
	o.declined, err = sdk.Start(ctx, client, placeOrder, Order{ID: "A-101", Email: "bob@example.com", AmountCents: 250_000})
	if err != nil {
		return nil, err
	}
	_, o.decErr = o.declined.Result(ctx)
	fmt.Fprintf(out, "err: %v\n", o.decErr)

	fmt.Fprintln(out, "\n== 3. Indeterminate: worker A is cut off from Postgres right after the provider took the charge ==")
	taken := make(chan struct{})
	pay.mu.Lock()
	pay.onTaken = func(p Payment) {
		if p.OrderID == "A-102" {
			net.cut() // the checkpoint of this charge will never reach the database
			close(taken)
		}
	}
	pay.mu.Unlock()
	o.cutOff, err = sdk.Start(ctx, client, placeOrder, Order{ID: "A-102", Email: "cy@example.com", AmountCents: 1999})
	if err != nil {
		return nil, err
	}
	select {
	case <-taken:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		return nil, errors.New("worker A never charged order A-102")
	}
	fmt.Fprintln(out, "the provider took the charge; worker A cannot record it. Starting worker B, which")
	fmt.Fprintln(out, "takes the run over when A's lease expires, finds the charge attempt lost and, since")
	fmt.Fprintln(out, "charge is at most once, does not run it again: the workflow gets sdk.ErrIndeterminate")
	fmt.Fprintln(out, "and reconciles with the provider.")
	stopB, err := startWorker(ctx, pool, schema, "worker-b", placeOrder)
	if err != nil {
		return nil, err
	}
	defer stopB()
	c, err = o.cutOff.Result(ctx)
	o.cutErr = err
	o.chargeCallsForCutOff = pay.Calls("A-102")
	fmt.Fprintf(out, "result: %+v, err: %v\n", c, err)
	fmt.Fprintf(out, "charge calls the provider saw for A-102: %d\n", o.chargeCallsForCutOff)
	if err := printHistory(ctx, out, op, o.cutOff); err != nil {
		return nil, err
	}
	mail.mu.Lock()
	o.confirmations = append(o.confirmations, mail.sent...)
	mail.mu.Unlock()

	fmt.Fprintf(out, "\n== Look at it yourself (schema %s) ==\n", schema)
	fmt.Fprintf(out, `psql "$DATABASE_URL" -c "SELECT * FROM %[1]s.shop_orders"
psql "$DATABASE_URL" -c "SELECT run_id, step, attempt, activity, status, duration, delay_before_next, delay_source, worker FROM %[1]s.attempt_timeline ORDER BY started_at"
psql "$DATABASE_URL" -c "SELECT run_id, reason, activity, attempts, error_message, failed_at FROM %[1]s.open_failures"
go -C cmd/tenure run . --schema %[1]s failures list
go -C cmd/tenure run . --schema %[1]s runs show %[2]s
`, schema, o.cutOff.ID)
	return o, nil
}

// startWorker runs a worker until the returned function stops it.
func startWorker(ctx context.Context, pool *pgxpool.Pool, schema, label string, wf sdk.Definition) (stop func(), err error) {
	w, err := runtime.NewWorker(pool, runtime.Config{
		Schema:            schema,
		Label:             label,
		LeaseTTL:          2 * time.Second, // short, so the takeover happens within seconds
		HeartbeatInterval: 500 * time.Millisecond,
		PollInterval:      50 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	if err := w.Register(wf); err != nil {
		return nil, err
	}
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	return func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Shutdown(shutdown)
	}, nil
}

// cuttableNetwork dials database connections that cut() severs at once,
// like a network partition between one worker and Postgres.
type cuttableNetwork struct {
	mu      sync.Mutex
	severed bool
	conns   []net.Conn
}

func (n *cuttableNetwork) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.severed {
		return nil, errors.New("network unreachable (simulated partition)")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		n.conns = append(n.conns, c)
	}
	return c, err
}

func (n *cuttableNetwork) cut() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.severed = true
	for _, c := range n.conns {
		_ = c.Close()
	}
}

func printHistory(ctx context.Context, out io.Writer, op *operator.Operator, r *sdk.Run[Confirmation]) error {
	h, err := op.History(ctx, r.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  %-4s %-7s %-18s %-10s %-9s %-20s %s\n", "step", "attempt", "activity", "status", "worker", "delay before next", "error")
	for _, a := range h {
		delay := "-"
		if a.Delay != nil {
			delay = fmt.Sprintf("%s (%s)", a.Delay.Round(time.Millisecond), a.DelaySource)
		}
		fmt.Fprintf(out, "  %-4d %-7d %-18s %-10s %-9s %-20s %s\n", a.Step, a.Attempt, a.Activity, a.Status, a.Worker, delay, a.ErrorMessage)
	}
	return nil
}
