package tenuretest_test

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// The application under test in this package's tests and Examples: a shop
// that charges a card at most once, records the order in the step's
// transaction and ships the parcel.

type Order struct {
	ID    string
	Cents int
}

type Receipt struct {
	Order   string
	Payment string
}

// Charge calls the payment provider, which tests never reach: they override it.
var Charge = activities.New("charge",
	func(ctx context.Context, o Order) (Receipt, error) {
		return Receipt{}, errors.New("payment provider unreachable from tests")
	},
	policy.MaxAttempts(3), policy.Constant(10*time.Millisecond), policy.Jitter(policy.NoJitter),
	policy.AtMostOnce(),
)

// RecordOrder writes the order in the step's transaction (table orders).
var RecordOrder = activities.NewTx("record-order",
	func(ctx context.Context, tx pgx.Tx, r Receipt) (string, error) {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id, payment) VALUES ($1, $2)`, r.Order, r.Payment)
		return r.Order, err
	})

// Ship hands the parcel to the carrier.
var Ship = activities.New("ship",
	func(ctx context.Context, order string) (string, error) { return "parcel-" + order, nil },
	policy.MaxAttempts(3), policy.Constant(10*time.Millisecond), policy.Jitter(policy.NoJitter),
)

var PlaceOrder = sdk.NewWorkflow("place-order", func(ctx context.Context, o Order) (string, error) {
	r, err := sdk.Execute(ctx, Charge, o)
	if err != nil {
		return "", err
	}
	if _, err := sdk.Execute(ctx, RecordOrder, r); err != nil {
		return "", err
	}
	return sdk.Execute(ctx, Ship, o.ID)
})

// ordersTable is the application's own table, created by each test in its
// env's schema (first on the search_path).
const ordersTable = `CREATE TABLE orders (id text PRIMARY KEY, payment text NOT NULL)`

// fakeCharge approves every payment.
func fakeCharge(ctx context.Context, o Order) (Receipt, error) {
	return Receipt{Order: o.ID, Payment: "pay-" + o.ID}, nil
}
