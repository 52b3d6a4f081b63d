// Command errortypes gives different errors different retry policies, on one
// activity that syncs customers to a CRM:
//
//   - *RateLimitError (matched by type, policy.OnType): up to 8 attempts,
//     waiting what the CRM asks (the error carries a Retry-After hint);
//
//   - ErrMaintenance (matched by value, policy.On): 4 attempts 100ms apart;
//
//   - a validation error, marked policy.Permanent: never retried;
//
//   - anything else: the activity's default, 3 attempts with exponential
//     backoff.
//
//     go run ./examples/workflows/errortypes
//
// It uses DATABASE_URL when set, in the schema tenure_errortypes (recreated
// on every run), and otherwise a private throwaway PostgreSQL cluster.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

const defaultSchema = "tenure_errortypes"

// RateLimitError is the CRM saying "too many requests, come back in Wait".
// It implements policy.RetryAfterer, so the delay is the one it asks for.
type RateLimitError struct{ Wait time.Duration }

// Error describes the rate limit.
func (e *RateLimitError) Error() string {
	return fmt.Sprintf("crm: rate limited, retry in %s", e.Wait)
}

// RetryAfter is the hint policy.Decide uses as the next delay.
func (e *RateLimitError) RetryAfter() time.Duration { return e.Wait }

// ErrMaintenance is the CRM's short maintenance window.
var ErrMaintenance = errors.New("crm: down for maintenance")

// ErrInvalidEmail is a validation error: the same request will fail again.
var ErrInvalidEmail = errors.New("crm: invalid e-mail address")

// Customer is the workflow's input.
type Customer struct {
	Name  string
	Email string
}

// crm is a fake CRM whose behaviour per customer is scripted: it fails with
// the listed errors in turn, then accepts.
type crm struct {
	mu     sync.Mutex
	script map[string][]error
}

func (c *crm) Upsert(cu Customer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cu.Email == "" {
		return ErrInvalidEmail
	}
	s := c.script[cu.Name]
	if len(s) == 0 {
		return nil
	}
	err := s[0]
	if len(s) > 1 { // the last error repeats forever
		c.script[cu.Name] = s[1:]
	}
	return err
}

func newCRM() *crm {
	rl := &RateLimitError{Wait: 50 * time.Millisecond}
	return &crm{script: map[string][]error{
		"alice": {rl, rl, rl, rl, nil},                 // rate limited 4 times: more than the default 3 attempts
		"dave":  {ErrMaintenance, ErrMaintenance, nil}, // maintenance twice
		"carol": {errors.New("crm: connection reset")}, // always
	}}
}

// newSyncCustomer declares the activity with its per-error policies, and the
// workflow that runs it.
func newSyncCustomer(c *crm) *sdk.Workflow[Customer, string] {
	upsert := activities.New("upsert-customer",
		func(ctx context.Context, cu Customer) (string, error) {
			err := c.Upsert(cu)
			if errors.Is(err, ErrInvalidEmail) {
				// Retrying cannot fix the input: fail now, with the reason
				// non_retryable, for a person to look at.
				return "", policy.Permanent(fmt.Errorf("customer %s: %w", cu.Name, err))
			}
			if err != nil {
				return "", err
			}
			return "synced " + cu.Name, nil
		},
		// The default, for errors no rule matches.
		policy.MaxAttempts(3),
		policy.Exponential(50*time.Millisecond, 2, time.Second),
		policy.Jitter(policy.NoJitter),
		// Rate limits are expected: be patient and wait what the CRM asks.
		policy.OnType[*RateLimitError](policy.MaxAttempts(8), policy.MaxRetryAfter(10*time.Second)),
		// Maintenance windows are short and regular.
		policy.On(ErrMaintenance, policy.MaxAttempts(4), policy.Constant(100*time.Millisecond)),
	)
	return sdk.NewWorkflow("sync-customer", func(ctx context.Context, cu Customer) (string, error) {
		return sdk.Execute(ctx, upsert, cu)
	})
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := mainErr(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "errortypes:", err)
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

// result is one customer's outcome, for the test.
type result struct {
	err     error
	history []record.Attempt
}

// run syncs four customers in schema (recreated) and prints each outcome
// with its attempts and delays.
func run(ctx context.Context, out io.Writer, url, schema string) (map[string]result, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		return nil, err
	}
	wf := newSyncCustomer(newCRM())
	w, err := runtime.NewWorker(pool, runtime.Config{
		Schema: schema, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
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
	defer func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Shutdown(shutdown)
	}()
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithPollInterval(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	op, err := operator.New(pool, operator.WithSchema(schema)) // reads the attempts table
	if err != nil {
		return nil, err
	}

	customers := []Customer{
		{Name: "alice", Email: "alice@example.com"},
		{Name: "bob"}, // no e-mail: invalid
		{Name: "carol", Email: "carol@example.com"},
		{Name: "dave", Email: "dave@example.com"},
	}
	runs := map[string]*sdk.Run[string]{}
	for _, cu := range customers {
		r, err := sdk.Start(ctx, client, wf, cu)
		if err != nil {
			return nil, err
		}
		runs[cu.Name] = r
	}
	results := map[string]result{}
	for _, cu := range customers {
		r := runs[cu.Name]
		_, rerr := r.Result(ctx)
		h, err := op.History(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		results[cu.Name] = result{err: rerr, history: h}
		outcome := "synced"
		var re *sdk.RunError
		if errors.As(rerr, &re) {
			outcome = "failed: " + string(re.Reason)
		}
		fmt.Fprintf(out, "\n%s: %s after %d attempts\n", cu.Name, outcome, len(h))
		for _, a := range h {
			delay := "-"
			if a.Delay != nil {
				delay = fmt.Sprintf("%s (%s)", *a.Delay, a.DelaySource)
			}
			fmt.Fprintf(out, "  %d  %-9s  %-20s  %s\n", a.Attempt, a.Status, delay, a.ErrorMessage)
		}
	}

	fmt.Fprintf(out, "\n== Look at it yourself (schema %s) ==\n", schema)
	fmt.Fprintf(out, `psql "$DATABASE_URL" -c "SELECT workflow, reason, attempts, error_type, error_message FROM %[1]s.open_failures"
psql "$DATABASE_URL" -c "SELECT error_type, delay_source, count(*) FROM %[1]s.attempt_timeline WHERE status = 'failed' GROUP BY 1, 2"
go -C cmd/tenure run . --schema %[1]s explain %[2]s 1
`, schema, runs["alice"].ID)
	return results, nil
}
