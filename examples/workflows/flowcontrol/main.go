// Command flowcontrol charges merchant accounts through a payment provider
// that takes two calls at once and five a second per account, and that goes
// down for a while. The provider is a downstream (package flow) with a
// concurrency limit and a rate limit per account and a circuit breaker:
// Tenure keeps every limit across the worker's runs, a charge that must wait
// is not an attempt, and while the provider is down the breaker stops the
// retries, lets one probe through, and closes when the probe succeeds. Then
// a person lowers a limit in SQL, audited, and gives it back to the code.
//
//	go run ./examples/workflows/flowcontrol
//
// It uses DATABASE_URL when set, in the schema tenure_flowcontrol (recreated
// on every run and left behind for you to query), and otherwise a private
// throwaway PostgreSQL cluster started from the binaries on PATH.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/devdb"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

const defaultSchema = "tenure_flowcontrol"

// Provider is the payment provider as a downstream: at most two calls at
// once and five starts a second (one every 200 ms, no burst) per merchant
// account; for the whole provider, a breaker that opens when half of at
// least four calls in two seconds failed, for one second.
var Provider = flow.New("payment-provider",
	flow.Concurrency(2),
	flow.Rate(5, time.Second, 1),
	flow.Breaker(flow.BreakerPolicy{ErrorRatio: 0.5, MinCalls: 4, Window: 2 * time.Second, OpenFor: time.Second}),
)

// Charge is the input of the charge-account workflow.
type Charge struct {
	Account string
	Cents   int
}

// callTime is how long the provider takes to answer a charge.
const callTime = 500 * time.Millisecond

// provider is a fake payment provider that counts the calls in progress per
// account, and answers 503 while it is down.
type provider struct {
	mu       sync.Mutex
	down     bool
	calls    int
	inFlight map[string]int
	most     map[string]int // the most calls in progress at once, per account
}

func newProvider() *provider {
	return &provider{inFlight: map[string]int{}, most: map[string]int{}}
}

// ErrUnavailable is the provider's 503: retried by the activity's policy,
// and counted as an error by the breaker.
var ErrUnavailable = errors.New("payment provider: 503 service unavailable")

// Charge takes a payment for an account.
func (p *provider) Charge(ctx context.Context, c Charge) (string, error) {
	p.mu.Lock()
	p.calls++
	if p.down {
		p.mu.Unlock()
		return "", ErrUnavailable
	}
	n := p.calls
	p.inFlight[c.Account]++
	p.most[c.Account] = max(p.most[c.Account], p.inFlight[c.Account])
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight[c.Account]--
		p.mu.Unlock()
	}()
	select {
	case <-time.After(callTime):
		return fmt.Sprintf("ch_%d", n), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (p *provider) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
}

func (p *provider) mostAtOnce(account string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.most[account]
}

// newChargeAccount declares the charge activity on p, calling Provider with
// the account as the key of its limits, and the workflow that runs it.
func newChargeAccount(p *provider) *sdk.Workflow[Charge, string] {
	charge := activities.New("charge", p.Charge,
		policy.MaxAttempts(30),
		policy.Constant(100*time.Millisecond),
		policy.Jitter(policy.NoJitter),
	).Calls(Provider, func(c Charge) string { return c.Account })
	return sdk.NewWorkflow("charge-account", func(ctx context.Context, c Charge) (string, error) {
		return sdk.Execute(ctx, charge, c)
	})
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := mainErr(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "flowcontrol:", err)
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
	accounts      []account // phase 1
	attempts      int64     // phase 1's attempts, for 12 charges
	rateWaits     int64     // phase 1's steps that waited for the rate
	breaker       []string  // the breaker's changes, "from>to"
	charged       int       // phase 2's runs that completed
	limitsSet     string    // the limits after a person's change
	limitsReset   string    // the limits after the reset
	limitsAuditBy []string  // the audit rows' "by", in order
}

// account is one account's charges in phase 1.
type account struct {
	name    string
	charged int
	most    int           // the most calls in progress at once
	minGap  time.Duration // the shortest time between two starts
}

// example is what the phases share.
type example struct {
	out    io.Writer
	pool   *pgxpool.Pool
	schema string // quoted, with a trailing dot
	client *sdk.Client
	p      *provider
	wf     *sdk.Workflow[Charge, string]
}

// run charges accounts in schema, which it recreates, and prints what the
// limits did and how to look at it.
func run(ctx context.Context, out io.Writer, url, schema string) (*outcome, error) {
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
	x := &example{out: out, pool: pool, schema: pgx.Identifier{schema}.Sanitize() + ".", p: newProvider()}
	x.wf = newChargeAccount(x.p)
	stop, err := startWorker(ctx, pool, schema, x.wf)
	if err != nil {
		return nil, err
	}
	defer stop()
	if x.client, err = sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithPollInterval(50*time.Millisecond)); err != nil {
		return nil, err
	}
	defer x.client.Close()

	o := &outcome{}
	for _, phase := range []func(context.Context, *outcome) error{x.limits, x.breaker, x.byHand} {
		if err := phase(ctx, o); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(out, "\n== Look at it yourself (schema %s) ==\n", schema)
	fmt.Fprintf(out, `psql "$DATABASE_URL" -c "SELECT name, in_use, waiting, breaker, admitted, retries, denied_concurrency, denied_rate, denied_breaker, denied_retry_budget FROM %[1]s.downstream_status"
psql "$DATABASE_URL" -c "SELECT run_id, step, waits, denials, throttled_for, last_cause FROM %[1]s.step_throttling ORDER BY throttled_for DESC"
psql "$DATABASE_URL" -c "SELECT run_id, attempt, status, started_at, throttled_for, throttled_by FROM %[1]s.attempt_timeline ORDER BY started_at"
psql "$DATABASE_URL" -c "SELECT at, from_state, to_state, why FROM %[1]s.breaker_history ORDER BY id"
`, schema)
	return o, nil
}

// startWorker runs a worker until the returned function stops it.
func startWorker(ctx context.Context, pool *pgxpool.Pool, schema string, wf sdk.Definition) (stop func(), err error) {
	w, err := runtime.NewWorker(pool, runtime.Config{
		Schema:       schema,
		Concurrency:  32,
		PollInterval: 50 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
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

// charge starts one run per account and waits for them all; it returns the
// runs that completed.
func (x *example) charge(ctx context.Context, accounts ...string) ([]*sdk.Run[string], int, error) {
	var params []sdk.StartParams[Charge]
	for _, a := range accounts {
		params = append(params, sdk.StartParams[Charge]{Input: Charge{Account: a, Cents: 4200}})
	}
	runs, err := sdk.StartMany(ctx, x.client, x.wf, params)
	if err != nil {
		return nil, 0, err
	}
	completed := 0
	for _, r := range runs {
		if _, err := r.Result(ctx); err == nil {
			completed++
		} else if ctx.Err() != nil {
			return nil, 0, err
		}
	}
	return runs, completed, nil
}

// limits charges three accounts four times each, all at once: each
// account's calls wait for the rate and for a slot.
func (x *example) limits(ctx context.Context, o *outcome) error {
	fmt.Fprintln(x.out, "\n== 1. Twelve charges at once: at most 2 at a time and one start per 200 ms, per account ==")
	names := []string{"acct-a", "acct-b", "acct-c"}
	var accounts []string
	for range 4 {
		accounts = append(accounts, names...)
	}
	if _, _, err := x.charge(ctx, accounts...); err != nil {
		return err
	}
	for _, name := range names {
		a := account{name: name, most: x.p.mostAtOnce(name)}
		var gapMS float64
		err := x.pool.QueryRow(ctx, `
			SELECT count(*), coalesce(min(gap), 0) FROM (
				SELECT extract(epoch FROM a.started_at - lag(a.started_at) OVER (ORDER BY a.started_at)) * 1000 AS gap
				FROM `+x.schema+`attempts a JOIN `+x.schema+`runs r ON r.id = a.run_id
				WHERE r.input->>'Account' = $1) AS s`, name).Scan(&a.charged, &gapMS)
		if err != nil {
			return err
		}
		a.minGap = time.Duration(gapMS * float64(time.Millisecond))
		o.accounts = append(o.accounts, a)
		fmt.Fprintf(x.out, "%s: %d charged; at once: %s; starts: %s\n", name, a.charged,
			verdict(a.most <= 2, "never more than 2", fmt.Sprintf("%d (over the limit!)", a.most)),
			verdict(a.minGap >= 200*time.Millisecond, "never closer than 200ms", "closer than 200ms (over the rate!)"))
	}
	err := x.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+x.schema+`attempts),
		(SELECT count(DISTINCT (run_id, step)) FROM `+x.schema+`throttles WHERE cause = 'rate')`).Scan(&o.attempts, &o.rateWaits)
	if err != nil {
		return err
	}
	fmt.Fprintf(x.out, "12 charges, %d attempts: a wait for a limit is not an attempt\n", o.attempts)
	fmt.Fprintf(x.out, "charges that waited for the rate: %s (step_throttling says how long)\n", verdict(o.rateWaits > 0, "some", "none"))
	return nil
}

// breaker charges six accounts while the provider is down: the breaker
// opens, holds the retries back, lets one probe through once the provider
// is back, and closes.
func (x *example) breaker(ctx context.Context, o *outcome) error {
	fmt.Fprintln(x.out, "\n== 2. The provider goes down: the breaker opens, one probe, then it closes ==")
	x.p.setDown(true)
	done := make(chan error, 1)
	var completed int
	go func() {
		var err error
		_, completed, err = x.charge(ctx, "acct-d", "acct-e", "acct-f", "acct-g", "acct-h", "acct-i")
		done <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for state := "closed"; state != flow.BreakerOpen; {
		if time.Now().After(deadline) {
			return errors.New("the breaker never opened")
		}
		time.Sleep(20 * time.Millisecond)
		if err := x.pool.QueryRow(ctx, `SELECT breaker FROM `+x.schema+`downstream_status WHERE name = $1`, Provider.Name()).Scan(&state); err != nil {
			return err
		}
	}
	fmt.Fprintln(x.out, "the provider answers 503: the breaker opened; the retries wait, charged nothing")
	x.p.setDown(false)
	if err := <-done; err != nil {
		return err
	}
	o.charged = completed
	fmt.Fprintf(x.out, "the provider is back: %d of 6 charged, none failed\n", completed)
	rows, _ := x.pool.Query(ctx, `SELECT from_state || '>' || to_state FROM `+x.schema+`breaker_history WHERE downstream = $1 ORDER BY id`, Provider.Name())
	changes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	o.breaker = changes
	fmt.Fprintf(x.out, "breaker: %s\n", strings.Join(changes, ", "))
	return nil
}

// byHand lowers the concurrency limit in SQL, as a person would during an
// incident, and gives the downstream back to its declaration.
func (x *example) byHand(ctx context.Context, o *outcome) error {
	fmt.Fprintln(x.out, "\n== 3. A person lowers a limit in SQL, audited, then gives it back to the code ==")
	limits := func(query string, args ...any) (string, error) {
		var b []byte
		if err := x.pool.QueryRow(ctx, query, args...).Scan(&b); err != nil {
			return "", err
		}
		var l flow.Limits
		err := json.Unmarshal(b, &l)
		return l.String(), err
	}
	var err error
	o.limitsSet, err = limits(`SELECT `+x.schema+`set_downstream($1, '{"concurrency": 1}', 'INC-42: the provider asks us to slow down')`, Provider.Name())
	if err != nil {
		return err
	}
	fmt.Fprintf(x.out, "set_downstream:   %s\n", o.limitsSet)
	if o.limitsReset, err = limits(`SELECT `+x.schema+`reset_downstream($1, 'INC-42 closed')`, Provider.Name()); err != nil {
		return err
	}
	fmt.Fprintf(x.out, "reset_downstream: %s\n", o.limitsReset)
	rows, _ := x.pool.Query(ctx, `SELECT (filter->>'by') || coalesce(' (' || note || ')', '') FROM `+x.schema+`audit_log
		WHERE action = 'limits' AND filter->>'downstream' = $1 ORDER BY id`, Provider.Name())
	if o.limitsAuditBy, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return err
	}
	fmt.Fprintln(x.out, "audit_log (action limits):")
	for _, by := range o.limitsAuditBy {
		if strings.HasPrefix(by, "declaration by ") {
			by = "declaration by the worker" // its label names the host and process
		}
		fmt.Fprintf(x.out, "  %s\n", by)
	}
	return nil
}

func verdict(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}
