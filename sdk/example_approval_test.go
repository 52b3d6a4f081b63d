package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/sdk"
)

// Expense is a claim that a manager approves or rejects.
type Expense struct {
	ID     string
	Amount int
	// Wait is how long the workflow waits for a decision before it
	// escalates.
	Wait time.Duration
}

// Decision is the payload of the "decision" signal.
type Decision struct {
	Approved bool   `json:"approved"`
	By       string `json:"by"`
}

// ApproveExpense waits for the manager's decision, a signal, for at most
// in.Wait; without one in time it escalates instead.
var ApproveExpense = sdk.NewWorkflow("approve-expense", func(ctx context.Context, in Expense) (string, error) {
	d, err := sdk.Receive[Decision](ctx, "decision", in.Wait)
	switch {
	case errors.Is(err, sdk.ErrTimeout):
		return fmt.Sprintf("%s escalated: no decision within %s", in.ID, in.Wait), nil
	case err != nil:
		return "", err
	case !d.Approved:
		return fmt.Sprintf("%s rejected by %s", in.ID, d.By), nil
	}
	return fmt.Sprintf("%s approved by %s", in.ID, d.By), nil
})

// Receive waits for a signal sent with Client.Send (or SendTx, or SQL's
// send_signal). While none is pending the run waits queued, holding no lease
// or worker slot, with runs.waiting_for 'signal:<name>': the send wakes it at
// once, the timeout (fixed by the database clock when Receive first ran)
// makes it due otherwise, and Receive then returns a *sdk.TimeoutError that
// matches sdk.ErrTimeout. Either way the receipt is a step of kind signal,
// replayed from its record.
func ExampleReceive() {
	pool, schema, client, op, done := startExample(nil, ApproveExpense)
	defer done()
	ctx := context.Background()

	approved, err := sdk.Start(ctx, client, ApproveExpense, Expense{ID: "EXP-1", Amount: 120, Wait: time.Hour})
	if err != nil {
		panic(err)
	}
	unanswered, err := sdk.Start(ctx, client, ApproveExpense, Expense{ID: "EXP-2", Amount: 80, Wait: 300 * time.Millisecond})
	if err != nil {
		panic(err)
	}

	r := awaitWaiting(ctx, op, approved.ID, "signal:decision")
	fmt.Println("EXP-1:", r.Status, r.WaitingFor)
	if err := client.Send(ctx, approved.ID, "decision", Decision{Approved: true, By: "maria"}); err != nil {
		panic(err)
	}
	out, err := approved.Result(ctx)
	fmt.Println(out, err)
	printTimeline(ctx, pool, schema, approved.ID)

	out, err = unanswered.Result(ctx)
	fmt.Println(out, err)
	printTimeline(ctx, pool, schema, unanswered.ID)

	err = client.Send(ctx, unanswered.ID, "decision", Decision{Approved: true, By: "late"})
	fmt.Println("send after the end:", errors.Is(err, sdk.ErrFinished))
	// Output:
	// EXP-1: queued signal:decision
	// EXP-1 approved by maria <nil>
	// 1 signal decision completed
	// EXP-2 escalated: no decision within 300ms <nil>
	// 1 signal decision failed
	// send after the end: true
}

// CountVotes receives n "vote" signals, one step each, and returns them in
// the order received.
var CountVotes = sdk.NewWorkflow("count-votes", func(ctx context.Context, n int) ([]string, error) {
	var votes []string
	for range n {
		v, err := sdk.Receive[string](ctx, "vote", 0)
		if err != nil {
			return nil, err
		}
		votes = append(votes, v)
	}
	return votes, nil
})

// Send delivers a signal to a run: committed when Send returns, kept until
// the workflow receives it (here the first two may come before the run
// started), and received once, in the order sent per name. SendTx sends in
// the caller's transaction: the signal exists only if it commits.
func ExampleClient_Send() {
	pool, schema, client, _, done := startExample(nil, CountVotes)
	defer done()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, CountVotes, 3)
	if err != nil {
		panic(err)
	}
	for _, v := range []string{"ann", "bob"} {
		if err := client.Send(ctx, run.ID, "vote", v); err != nil {
			panic(err)
		}
	}
	tx, _ := pool.Begin(ctx)
	_ = client.SendTx(ctx, tx, run.ID, "vote", "cy")
	_ = tx.Rollback(ctx) // cy's vote was not saved after all: never sent
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return client.SendTx(ctx, tx, run.ID, "vote", "dee")
	})
	if err != nil {
		panic(err)
	}
	votes, err := run.Result(ctx)
	fmt.Println(votes, err)

	rows, _ := pool.Query(ctx, `SELECT payload #>> '{}', consumed_step FROM `+pgx.Identifier{schema}.Sanitize()+
		`.signals WHERE run_id = $1 ORDER BY id`, run.ID)
	var payload string
	var step int
	_, _ = pgx.ForEachRow(rows, []any{&payload, &step}, func() error {
		fmt.Println(payload, "received by step", step)
		return nil
	})
	// Output:
	// [ann bob dee] <nil>
	// ann received by step 1
	// bob received by step 2
	// dee received by step 3
}
