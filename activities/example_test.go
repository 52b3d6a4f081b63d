package activities_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/policy"
)

type ChargeIn struct{ Amount int }

// An activity is declared once with its default policy. At run time its
// context tells which attempt it is, and gives a key that is the same for
// every attempt of the step, for remote systems that deduplicate.
func ExampleNew() {
	charge := activities.New("charge",
		func(ctx context.Context, in ChargeIn) (string, error) {
			info, _ := activities.InfoFrom(ctx)
			return fmt.Sprintf("charged %d, attempt %d, key %s", in.Amount, info.Attempt, activities.IdempotencyKey(ctx)), nil
		},
		policy.MaxAttempts(5),
		policy.Exponential(time.Second, 2, time.Minute),
		policy.Jitter(policy.FullJitter),
		policy.AtMostOnce(),
	)

	// What the runtime does for each attempt, done by hand as a unit test would.
	ctx := activities.WithInfo(context.Background(), activities.Info{
		RunID: uuid.MustParse("0190f3c4-0000-7000-8000-000000000001"), Step: 2, Attempt: 3,
	})
	out, err := charge.Call(ctx, nil, ChargeIn{Amount: 4200})
	fmt.Println(charge.Name(), out, err)
	// Output:
	// charge charged 4200, attempt 3, key 0190f3c4-0000-7000-8000-000000000001/2 <nil>
}

// A transactional activity writes with the transaction in which its step's
// result is checkpointed: both commit, or neither.
func ExampleNewTx() {
	record := activities.NewTx("record-order",
		func(ctx context.Context, tx pgx.Tx, in ChargeIn) (int64, error) {
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO orders (amount) VALUES ($1) RETURNING id`, in.Amount).Scan(&id)
			return id, err
		})
	fmt.Println(record.Name(), record.Transactional())
	// Output: record-order true
}

// An invalid policy stops the program where the activity is declared, not a
// run at 3 a.m. The panic's value is an error wrapping the
// *policy.ValidationError.
func ExampleNew_invalidPolicy() {
	defer func() {
		err := recover().(error)
		fmt.Println(err)
		var ve *policy.ValidationError
		if errors.As(err, &ve) {
			fmt.Println("field:", ve.Field)
		}
	}()
	activities.New("bad", func(ctx context.Context, in ChargeIn) (int, error) { return 0, nil },
		policy.MaxAttempts(0))
	// Output:
	// activity "bad": invalid policy: policy: max_attempts = 0: must be at least 1
	// field: max_attempts
}

// AccountCharge is the input of a charge made for an account.
type AccountCharge struct {
	Account string
	Amount  int
}

// An activity that calls a downstream shares the downstream's limits with
// every activity that calls it. The key function takes, from each input,
// the key whose concurrency and rate limits apply (here the account: one
// busy account cannot use up another's share); the retry budget and the
// breaker are the downstream's, whatever the key.
func ExampleActivity_Calls() {
	payments := flow.New("payments", flow.Concurrency(2), flow.Rate(5, time.Second, 1), flow.Breaker(flow.BreakerPolicy{}))
	charge := activities.New("charge",
		func(ctx context.Context, in AccountCharge) (string, error) { return "ch_1", nil },
		policy.MaxAttempts(5),
	)
	limited := charge.Calls(payments, func(in AccountCharge) string { return in.Account })

	// What the runtime asks before each attempt of a step.
	key, err := limited.Key([]byte(`{"Account": "acct-7", "Amount": 4200}`))
	fmt.Println(limited.Downstream().Name(), key, err)
	// Calls returns a copy: charge itself calls no downstream.
	fmt.Println(charge.Downstream() == nil)
	// Output:
	// payments acct-7 <nil>
	// true
}
