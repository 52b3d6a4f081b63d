package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// printTimeline prints a run's steps as the step_timeline view shows them:
// number, kind, name and status.
func printTimeline(ctx context.Context, pool *pgxpool.Pool, schema string, runID uuid.UUID) {
	rows, _ := pool.Query(ctx, `SELECT step, kind, name, status FROM `+pgx.Identifier{schema}.Sanitize()+
		`.step_timeline WHERE run_id = $1 ORDER BY step`, runID)
	var step int
	var kind, name, status string
	_, err := pgx.ForEachRow(rows, []any{&step, &kind, &name, &status}, func() error {
		fmt.Println(step, kind, name, status)
		return nil
	})
	if err != nil {
		panic(err)
	}
}

// awaitWaiting returns once run runID waits, without a lease, for what
// (runs.waiting_for: "sleep", "signal:<name>", "child:<id>").
func awaitWaiting(ctx context.Context, op *operator.Operator, runID uuid.UUID, what string) record.Run {
	for {
		r, err := op.Run(ctx, runID)
		if err != nil {
			panic(err)
		}
		if r.Status == record.RunQueued && r.WaitingFor == what {
			return r
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startExample opens a schema, starts a worker of cfg (edited by tune) with
// the workflows, and returns a client: what every example of this file
// needs. done closes all of it.
func startExample(tune func(*runtime.Config), defs ...sdk.Definition) (pool *pgxpool.Pool, schema string, client *sdk.Client, op *operator.Operator, done func()) {
	pool, schema, closeDB := exampledb.Open()
	ctx := context.Background()
	cfg := testWorker(schema)
	if tune != nil {
		tune(&cfg)
	}
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		panic(err)
	}
	if err := w.Register(defs...); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	client, err = sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	op, err = operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	return pool, schema, client, op, func() {
		client.Close()
		_ = w.Shutdown(ctx)
		closeDB()
	}
}

// SendReminder sends the reminder of an unpaid invoice.
var SendReminder = activities.New("send-reminder", func(ctx context.Context, invoice string) (string, error) {
	return "reminded " + invoice, nil
})

// RemindLater waits before it reminds: a durable sleep, a step of its own.
var RemindLater = sdk.NewWorkflow("remind-later", func(ctx context.Context, invoice string) (string, error) {
	if err := sdk.Sleep(ctx, 300*time.Millisecond); err != nil {
		return "", err
	}
	return sdk.Execute(ctx, SendReminder, invoice)
})

// Sleep pauses a workflow durably. A sleep longer than the worker's
// MaxInProcessSleep (here 50ms, to keep the example short; 10s by default)
// releases the lease: the run waits queued, holding no worker slot, with
// runs.waiting_for 'sleep' and run_after its due time, fixed by the database
// clock when the sleep first ran. The worker that claims it when it is due
// replays the workflow up to the sleep, finds it due, and goes on.
func ExampleSleep() {
	pool, schema, client, op, done := startExample(func(c *runtime.Config) {
		c.MaxInProcessSleep = 50 * time.Millisecond
	}, RemindLater)
	defer done()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, RemindLater, "INV-7")
	if err != nil {
		panic(err)
	}
	r := awaitWaiting(ctx, op, run.ID, "sleep")
	fmt.Println("sleeping:", r.Status, r.WaitingFor)
	out, err := run.Result(ctx)
	fmt.Println(out, err)

	var dueMS int
	var wokeLate bool
	_ = pool.QueryRow(ctx, `SELECT round(extract(epoch FROM due_at - started_at) * 1000), woke_at >= due_at
		FROM `+pgx.Identifier{schema}.Sanitize()+`.step_timeline WHERE run_id = $1 AND kind = 'sleep'`, run.ID).Scan(&dueMS, &wokeLate)
	fmt.Println("due after:", dueMS, "ms; woke after it:", wokeLate)
	printTimeline(ctx, pool, schema, run.ID)
	// Output:
	// sleeping: queued sleep
	// reminded INV-7 <nil>
	// due after: 300 ms; woke after it: true
	// 1 sleep sleep completed
	// 2 activity send-reminder completed
}

// importProgress reports how far an import got: the value of its event.
type importProgress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// ImportRows sets its "progress" event after the first half, waits for the
// go-ahead signal, and sets it again at the end.
var ImportRows = sdk.NewWorkflow("import-rows", func(ctx context.Context, total int) (int, error) {
	if err := sdk.SetEvent(ctx, "progress", importProgress{Done: total / 2, Total: total}); err != nil {
		return 0, err
	}
	if _, err := sdk.Receive[bool](ctx, "go-ahead", 0); err != nil {
		return 0, err
	}
	return total, sdk.SetEvent(ctx, "progress", importProgress{Done: total, Total: total})
})

// SetEvent publishes a value of a running workflow (progress, an
// intermediate result) for code outside it: GetEvent waits for it to be set,
// and reads the latest value per key. Each SetEvent is a step of kind event,
// recorded once; the events table keeps the latest value.
func ExampleSetEvent() {
	pool, schema, client, _, done := startExample(nil, ImportRows)
	defer done()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, ImportRows, 1000)
	if err != nil {
		panic(err)
	}
	p, err := sdk.GetEvent[importProgress](ctx, client, run.ID, "progress", 10*time.Second)
	fmt.Printf("while it runs: %+v %v\n", p, err)

	if err := client.Send(ctx, run.ID, "go-ahead", true); err != nil {
		panic(err)
	}
	if _, err := run.Result(ctx); err != nil {
		panic(err)
	}
	p, err = sdk.GetEvent[importProgress](ctx, client, run.ID, "progress", 0)
	fmt.Printf("after it ended: %+v %v\n", p, err)

	var value string
	_ = pool.QueryRow(ctx, `SELECT value::text FROM `+pgx.Identifier{schema}.Sanitize()+
		`.events WHERE run_id = $1 AND key = 'progress'`, run.ID).Scan(&value)
	fmt.Println("events row:", value)
	printTimeline(ctx, pool, schema, run.ID)
	// Output:
	// while it runs: {Done:500 Total:1000} <nil>
	// after it ended: {Done:1000 Total:1000} <nil>
	// events row: {"done": 1000, "total": 1000}
	// 1 event progress completed
	// 2 signal go-ahead completed
	// 3 event progress completed
}

// GetEvent waits up to its timeout for the event to be set (0: it only
// reads), and says why it has no value: a *TimeoutError matching
// sdk.ErrTimeout while the run may still set it, an error wrapping
// sdk.ErrFinished once the run ended without setting it.
func ExampleGetEvent() {
	_, _, client, _, done := startExample(nil, ImportRows)
	defer done()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, ImportRows, 10)
	if err != nil {
		panic(err)
	}
	_, err = sdk.GetEvent[importProgress](ctx, client, run.ID, "errors", 100*time.Millisecond)
	var te *sdk.TimeoutError
	fmt.Println("not yet set:", errors.Is(err, sdk.ErrTimeout), errors.As(err, &te) && te.Timeout == 100*time.Millisecond)

	if err := client.Send(ctx, run.ID, "go-ahead", true); err != nil {
		panic(err)
	}
	if _, err := run.Result(ctx); err != nil {
		panic(err)
	}
	_, err = sdk.GetEvent[importProgress](ctx, client, run.ID, "errors", time.Minute)
	fmt.Println("never set:", errors.Is(err, sdk.ErrFinished))
	// Output:
	// not yet set: true true
	// never set: true
}

// ticketCalls counts the calls of the function given to SideEffect, and
// ticketSeen receives what each execution of IssueTicket saw: the example's
// way to look inside the workflow.
var (
	ticketCalls atomic.Int32
	ticketSeen  = make(chan string, 8)
)

// IssueTicket makes a ticket number (with SideEffect: a random or
// sequential value must not change on replay), waits durably, and returns
// it. The sleep releases the lease, so the workflow function runs twice.
var IssueTicket = sdk.NewWorkflow("issue-ticket", func(ctx context.Context, event string) (string, error) {
	ticket, err := sdk.SideEffect(ctx, func() (string, error) {
		n := ticketCalls.Add(1)
		return fmt.Sprintf("%s-%04d", event, 17*n), nil
	})
	if err != nil {
		return "", err
	}
	ticketSeen <- ticket
	if err := sdk.Sleep(ctx, 150*time.Millisecond); err != nil {
		return "", err
	}
	return ticket, nil
})

// SideEffect records a value made in workflow code once: a replay returns
// the recorded value without calling the function again.
func ExampleSideEffect() {
	pool, schema, client, _, done := startExample(func(c *runtime.Config) {
		c.MaxInProcessSleep = 10 * time.Millisecond
	}, IssueTicket)
	defer done()
	ctx := context.Background()
	ticketCalls.Store(0)

	run, err := sdk.Start(ctx, client, IssueTicket, "GOPHERCON")
	if err != nil {
		panic(err)
	}
	out, err := run.Result(ctx)
	fmt.Println(out, err)
	var seen []string
	for len(ticketSeen) > 0 {
		seen = append(seen, <-ticketSeen)
	}
	fmt.Println("executions:", len(seen), "saw:", seen, "calls:", ticketCalls.Load())
	printTimeline(ctx, pool, schema, run.ID)
	// Output:
	// GOPHERCON-0017 <nil>
	// executions: 2 saw: [GOPHERCON-0017 GOPHERCON-0017] calls: 1
	// 1 side_effect side_effect completed
	// 2 sleep sleep completed
}

// OpenPoll opens a poll for a short while: its deadline comes from Now,
// which the database clock fixes at the step's first execution and every
// replay returns unchanged (time.Now in workflow code would not).
var OpenPoll = sdk.NewWorkflow("open-poll", func(ctx context.Context, _ struct{}) (time.Time, error) {
	now, err := sdk.Now(ctx)
	if err != nil {
		return time.Time{}, err
	}
	closes := now.Add(200 * time.Millisecond)
	return closes, sdk.SleepUntil(ctx, closes)
})

// Now is the workflow's clock: the time recorded once, as a step of kind
// now.
func ExampleNow() {
	pool, schema, client, _, done := startExample(nil, OpenPoll)
	defer done()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, OpenPoll, struct{}{})
	if err != nil {
		panic(err)
	}
	closes, err := run.Result(ctx)
	fmt.Println("result:", err)

	var now, due time.Time
	_ = pool.QueryRow(ctx, `SELECT (SELECT (output #>> '{}')::timestamptz FROM `+pgx.Identifier{schema}.Sanitize()+`.steps
	                                WHERE run_id = $1 AND step = 1),
	                               (SELECT due_at FROM `+pgx.Identifier{schema}.Sanitize()+`.steps
	                                WHERE run_id = $1 AND step = 2)`, run.ID).Scan(&now, &due)
	fmt.Println("the sleep is due at the recorded now + 200ms:", due.Equal(now.Add(200*time.Millisecond)), due.Equal(closes))
	printTimeline(ctx, pool, schema, run.ID)
	// Output:
	// result: <nil>
	// the sleep is due at the recorded now + 200ms: true true
	// 1 now now completed
	// 2 sleep sleep completed
}

// seatLog records the steps HoldSeat's cleanup tried.
var seatLog = make(chan string, 4)

// HoldSeat and FreeSeat reserve a seat and give it back.
var (
	HoldSeat = activities.New("hold-seat", func(ctx context.Context, seat string) (string, error) {
		return "held " + seat, nil
	})
	FreeSeat = activities.New("free-seat", func(ctx context.Context, seat string) (string, error) {
		return "freed " + seat, nil
	})
)

// SeatHold holds a seat for an hour, durably, then lets it go. When the run
// is cancelled meanwhile, the sleep returns sdk.ErrCancelled; a step called
// with the workflow's context after that is refused (it returns an error
// wrapping ErrCancelled without running), one called with
// sdk.Detached(ctx) runs.
var SeatHold = sdk.NewWorkflow("seat-hold", func(ctx context.Context, seat string) (string, error) {
	if _, err := sdk.Execute(ctx, HoldSeat, seat); err != nil {
		return "", err
	}
	err := sdk.Sleep(ctx, time.Hour)
	if errors.Is(err, sdk.ErrCancelled) {
		_, refused := sdk.Execute(ctx, FreeSeat, seat)
		seatLog <- fmt.Sprint("with ctx: ", errors.Is(refused, sdk.ErrCancelled))
		freed, cerr := sdk.Execute(sdk.Detached(ctx), FreeSeat, seat)
		seatLog <- fmt.Sprint("with Detached(ctx): ", freed, " ", cerr)
		return "", err
	}
	return "released " + seat, err
})

// Detached gives a cancelled workflow a context for its cleanup. Cancel of
// a run that waits (here in a durable sleep) wakes it; the worker that
// claims it replays it with its context cancelled, the sleep returns
// sdk.ErrCancelled, and only steps under Detached run. The run ends
// cancelled when the workflow returns.
func ExampleDetached() {
	pool, schema, client, op, done := startExample(nil, SeatHold)
	defer done()
	ctx := context.Background()

	run, err := sdk.Start(ctx, client, SeatHold, "12C")
	if err != nil {
		panic(err)
	}
	awaitWaiting(ctx, op, run.ID, "sleep")
	fmt.Println("cancel:", client.Cancel(ctx, run.ID))
	_, err = run.Result(ctx)
	fmt.Println("result is ErrCancelled:", errors.Is(err, sdk.ErrCancelled))
	fmt.Println(<-seatLog)
	fmt.Println(<-seatLog)
	printTimeline(ctx, pool, schema, run.ID)
	// Output:
	// cancel: <nil>
	// result is ErrCancelled: true
	// with ctx: true
	// with Detached(ctx): freed 12C <nil>
	// 1 activity hold-seat completed
	// 2 sleep sleep waiting
	// 4 activity free-seat completed
}
