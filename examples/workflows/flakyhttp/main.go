// Command flakyhttp calls an HTTP API that answers 429 and 503 with a
// Retry-After header before it answers 200, and shows that Tenure waits what
// the server asked (clamped by the policy), recording each delay and its
// source ("retry-after") in the attempt history. A 404 is permanent: no
// retry, a failure row at once.
//
//	go run ./examples/workflows/flakyhttp
//
// The API is a local httptest server. The example uses DATABASE_URL when
// set, in the schema tenure_flakyhttp (recreated on every run), and otherwise
// a private throwaway PostgreSQL cluster.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

const defaultSchema = "tenure_flakyhttp"

// Quote is what the API returns for a product.
type Quote struct {
	SKU        string `json:"sku"`
	PriceCents int    `json:"price_cents"`
}

// HTTPError is a response the API gave instead of a quote.
type HTTPError struct {
	Status int
	Body   string
}

// Error describes the HTTP answer.
func (e *HTTPError) Error() string { return fmt.Sprintf("quotes API: %d %s", e.Status, e.Body) }

// newAPI is a quotes API that is rate limited, then overloaded, then fine:
// 429 with "Retry-After: 1", then 503 with "Retry-After: 120" (longer than
// the policy allows), then 200. Unknown products are 404.
func newAPI() *httptest.Server {
	var mu sync.Mutex
	calls := map[string]int{}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sku := r.URL.Path[len("/quotes/"):]
		if sku != "espresso-machine" {
			http.Error(w, "no such product", http.StatusNotFound)
			return
		}
		mu.Lock()
		calls[sku]++
		n := calls[sku]
		mu.Unlock()
		switch n {
		case 1:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case 2:
			w.Header().Set("Retry-After", "120")
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		default:
			_ = json.NewEncoder(w).Encode(Quote{SKU: sku, PriceCents: 24900})
		}
	}))
}

// newFetchQuote declares the activity that calls the API at baseURL, and
// the workflow that runs it.
func newFetchQuote(baseURL string) *sdk.Workflow[string, Quote] {
	fetch := activities.New("fetch-quote",
		func(ctx context.Context, sku string) (Quote, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/quotes/"+sku, nil)
			if err != nil {
				return Quote{}, policy.Permanent(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return Quote{}, err // network trouble: retry by the policy
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				var q Quote
				return q, json.NewDecoder(resp.Body).Decode(&q)
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
			herr := &HTTPError{Status: resp.StatusCode, Body: strings.TrimSpace(string(body))}
			switch {
			case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
				// Wait what the server asks, if it says (seconds or an HTTP date).
				if d, ok := policy.RetryAfterFromResponse(resp, time.Now()); ok {
					return Quote{}, policy.WithRetryAfter(herr, d)
				}
				return Quote{}, herr
			default:
				return Quote{}, policy.Permanent(herr) // 4xx: asking again will not help
			}
		},
		policy.MaxAttempts(5),
		policy.Exponential(100*time.Millisecond, 2, 2*time.Second),
		policy.Jitter(policy.FullJitter),
		// A server may ask for a long wait; this step waits 1.5s at most.
		policy.MaxRetryAfter(1500*time.Millisecond),
	)
	return sdk.NewWorkflow("price-product", func(ctx context.Context, sku string) (Quote, error) {
		return sdk.Execute(ctx, fetch, sku)
	})
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := mainErr(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "flakyhttp:", err)
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
	quote    Quote
	quoteErr error
	missErr  error
	history  []record.Attempt
}

// run prices one product through the flaky API and one unknown product, in
// schema (recreated), and prints the history and the SQL to look at it.
func run(ctx context.Context, out io.Writer, url, schema string) (*outcome, error) {
	api := newAPI()
	defer api.Close()
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
	wf := newFetchQuote(api.URL)
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
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithPollInterval(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	op, err := operator.New(pool, operator.WithSchema(schema)) // reads the attempts table
	if err != nil {
		return nil, err
	}
	o := &outcome{}

	fmt.Fprintln(out, "== 1. 429 (Retry-After: 1), then 503 (Retry-After: 120, clamped to 1.5s), then 200 ==")
	run, err := sdk.Start(ctx, client, wf, "espresso-machine")
	if err != nil {
		return nil, err
	}
	o.quote, o.quoteErr = run.Result(ctx)
	fmt.Fprintf(out, "quote: %+v, err: %v\n", o.quote, o.quoteErr)
	if o.history, err = op.History(ctx, run.ID); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  %-7s %-10s %-28s %s\n", "attempt", "status", "delay before next (source)", "error")
	for _, a := range o.history {
		delay := "-"
		if a.Delay != nil {
			delay = fmt.Sprintf("%s (%s)", *a.Delay, a.DelaySource)
		}
		fmt.Fprintf(out, "  %-7d %-10s %-28s %s\n", a.Attempt, a.Status, delay, a.ErrorMessage)
	}

	fmt.Fprintln(out, "\n== 2. 404: permanent, no retry ==")
	miss, err := sdk.Start(ctx, client, wf, "flux-capacitor")
	if err != nil {
		return nil, err
	}
	_, o.missErr = miss.Result(ctx)
	var re *sdk.RunError
	if errors.As(o.missErr, &re) {
		fmt.Fprintf(out, "failed: reason=%s activity=%s error=%q\n", re.Reason, re.Activity, re.Message)
	}

	fmt.Fprintf(out, "\n== Look at it yourself (schema %s) ==\n", schema)
	fmt.Fprintf(out, `psql "$DATABASE_URL" -c "SELECT attempt, status, duration, delay_before_next, delay_source, waited, error_message FROM %[1]s.attempt_timeline WHERE run_id = '%[2]s'"
psql "$DATABASE_URL" -c "SELECT delay_source, count(*), avg(delay_before_next) FROM %[1]s.attempt_timeline GROUP BY 1"
go -C cmd/tenure run . --schema %[1]s runs show %[2]s
`, schema, run.ID)
	return o, nil
}
