package operator_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// Relay is the mail relay that the notification activities share: at most
// 10 mails in flight, 100 a second in bursts of 20.
var Relay = flow.New("mail-relay", flow.Concurrency(10), flow.Rate(100, time.Second, 20))

// SendMail calls the relay.
var SendMail = activities.New("send-mail", func(ctx context.Context, to string) (string, error) {
	return "mailed " + to, nil
}).Calls(Relay, nil)

// Notify mails one address.
var Notify = sdk.NewWorkflow("notify", func(ctx context.Context, to string) (string, error) {
	return sdk.Execute(ctx, SendMail, to)
})

// startNotifier starts a worker of Notify and a client on schema, and runs
// Notify once: a downstream's row exists from its first call.
func startNotifier(pool *pgxpool.Pool, schema string) (*sdk.Client, func()) {
	ctx := context.Background()
	w, err := runtime.NewWorker(pool, runtime.Config{Schema: schema, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	if err := w.Register(Notify); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	run, err := sdk.Start(ctx, client, Notify, "first@example.com")
	if err != nil {
		panic(err)
	}
	if _, err := run.Result(ctx); err != nil {
		panic(err)
	}
	return client, func() { client.Close(); _ = w.Shutdown(ctx) }
}

// A downstream's limits change at run time: the relay asks for fewer mails
// at once during an incident. Every worker applies the change at its next
// admission, the audit log keeps it with its note, and the limits the code
// declares no longer apply until they are reset.
func ExampleOperator_SetLimits() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	_, stop := startNotifier(pool, schema)
	defer stop()
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}

	d, _ := op.Downstream(ctx, "mail-relay")
	fmt.Println("declared:", d.Limits)
	limits, err := op.SetLimits(ctx, "mail-relay",
		operator.LimitsChange{Concurrency: new(2), RemoveRate: true}, "INC-12: the relay throttles us")
	if err != nil {
		panic(err)
	}
	fmt.Println("set:     ", limits)
	d, _ = op.Downstream(ctx, "mail-relay")
	fmt.Println("overridden:", d.Overridden()) // by d.OverriddenBy, the database role

	_, err = op.SetLimits(ctx, "mail-relay", operator.LimitsChange{Burst: new(5)}, "")
	fmt.Println("refused:", err)

	limits, _ = op.ResetLimits(ctx, "mail-relay", "INC-12 closed")
	fmt.Println("reset:   ", limits)
	audit, _ := op.AuditLog(ctx, 2)
	for _, e := range audit {
		fmt.Println(e.Action, e.Filter["by"], e.Note)
	}
	// Output:
	// declared: concurrency 10, rate 100/1s burst 20, retries 20%+10/s
	// set:      concurrency 2, retries 20%+10/s
	// overridden: true
	// refused: set limits of downstream "mail-relay": a rate interval or burst needs a rate: the downstream has no rate limit: invalid downstream
	// reset:    concurrency 10, rate 100/1s burst 20, retries 20%+10/s
	// limits reset to the declaration INC-12 closed
	// limits person INC-12: the relay throttles us
}

// A breaker opened by hand holds every call of its downstream, however the
// calls go, until it is closed by hand: the steps that would call it wait,
// charged nothing, and go on when it closes.
func ExampleOperator_OpenBreaker() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	client, stop := startNotifier(pool, schema)
	defer stop()
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}

	if err := op.OpenBreaker(ctx, "mail-relay", "INC-13: the relay sends spam"); err != nil {
		panic(err)
	}
	run, _ := sdk.Start(ctx, client, Notify, "ada@example.com")
	for d, _ := op.Downstream(ctx, "mail-relay"); d.Waiting == 0; d, _ = op.Downstream(ctx, "mail-relay") {
		time.Sleep(10 * time.Millisecond) // until the run's step is denied
	}
	d, _ := op.Downstream(ctx, "mail-relay")
	fmt.Println("breaker", d.Breaker, "by hand:", d.BreakerManual, "waiting:", d.Waiting, "denied:", d.DeniedBreaker)

	if err := op.CloseBreaker(ctx, "mail-relay", "INC-13: relay fixed"); err != nil {
		panic(err)
	}
	fmt.Println(run.Result(ctx))
	history, _ := op.BreakerHistory(ctx, "mail-relay", 10)
	for _, c := range history {
		fmt.Printf("%s -> %s by %s: %s\n", c.From, c.To, c.By, c.Why)
	}
	// Output:
	// breaker open by hand: true waiting: 1 denied: 1
	// mailed ada@example.com <nil>
	// open -> closed by person: INC-13: relay fixed
	// closed -> open by person: INC-13: the relay sends spam
}
