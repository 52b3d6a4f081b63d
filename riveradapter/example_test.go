package riveradapter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/riveradapter"
)

// Kind "send_email" retries 40 times, exponentially from a second up to
// ten minutes, never on a permanent error, and waits out a Retry-After
// hint of up to an hour without spending an attempt; every other kind
// keeps River's retry policy.
func ExampleRetry_Configure() {
	p, err := policy.New(policy.MaxAttempts(40), policy.Exponential(time.Second, 2, 10*time.Minute), policy.MaxRetryAfter(time.Hour))
	if err != nil {
		panic(err)
	}
	r, err := riveradapter.NewRetry(riveradapter.Kind("send_email", p))
	if err != nil {
		panic(err)
	}
	cfg := &river.Config{ /* Queues, Workers, ... */ }
	if err := r.Configure(cfg); err != nil {
		panic(err)
	}
	fmt.Println(cfg.RetryPolicy == r, len(cfg.Middleware), cfg.MaxAttempts)
	// Output: true 1 40
}

// With Record, every attempt of the client's jobs is a Tenure attempt row
// in schema "tenure" (its failures in Tenure's failure table, requeued
// with a fresh budget), and kind "charge_card" may be rescued twice after
// a crash, apart from its 5 attempts for errors. RunReconciler records
// what River ends by itself and puts requeued jobs back.
func Example_record() {
	pool, err := pgxpool.New(context.Background(), "") // by the PG* environment settings; it connects at first use
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	p, err := policy.New(policy.MaxAttempts(5), policy.MaxRescues(2))
	if err != nil {
		panic(err)
	}
	r, err := riveradapter.NewRetry(riveradapter.Kind("charge_card", p), riveradapter.Record(pool, "tenure"))
	if err != nil {
		panic(err)
	}
	cfg := &river.Config{RescueStuckJobsAfter: 5 * time.Minute /* Queues, Workers, ... */}
	if err := r.Configure(cfg); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()                               // here, so that the example ends; in a program, the process's context
	err = r.RunReconciler(ctx, 0)          // in a program: go r.RunReconciler(ctx, 0)
	fmt.Println(cfg.RetryPolicy == r, err) // the pass it made failed (no database here) and was logged
	// Output: true <nil>
}
