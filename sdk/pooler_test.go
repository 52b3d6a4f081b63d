package sdk_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// logBuffer collects what a logger writes.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// pooled is a migrated schema reached through a pgbouncer in transaction
// mode (exec mode cache_describe), with a worker serving Ship through it,
// and a direct pool for looking at the server.
type pooled struct {
	pool, direct *pgxpool.Pool
	directConfig *pgx.ConnConfig
	schema       string
}

func newPooled(t *testing.T, worker func(*runtime.Config)) *pooled {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), pgtest.Pgbouncer(t, pgtest.URL(t), "transaction")+"&default_query_exec_mode=cache_describe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	direct, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testWorker(schema)
	cfg.ListenConfig = direct
	if worker != nil {
		worker(&cfg)
	}
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(Ship); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	return &pooled{pool: pool, direct: pgtest.Pool(t), directConfig: direct, schema: schema}
}

func (p *pooled) client(t *testing.T, opts ...sdk.ClientOption) *sdk.Client {
	c, err := sdk.NewClient(p.pool, append([]sdk.ClientOption{sdk.WithSchema(p.schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// With a direct LISTEN connection, Result through a transaction pooler is
// woken by each run's notice: with a poll interval of a minute, a missed
// notice would stall the test.
func TestPooler_ResultWithADirectListenConnectionIsWokenByNotices(t *testing.T) {
	t.Parallel()
	p := newPooled(t, nil)
	var log logBuffer
	c := p.client(t, sdk.WithListenConfig(p.directConfig), sdk.WithPollInterval(time.Minute),
		sdk.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var took []time.Duration
	for i := range 20 {
		began := time.Now()
		run, err := sdk.Start(ctx, c, Ship, OrderIn{ID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := run.Result(ctx); err != nil || out != fmt.Sprintf("shipped %d", i) {
			t.Fatalf("run %d: %q, %v", i, out, err)
		}
		took = append(took, time.Since(began))
	}
	runs, err := sdk.StartMany(ctx, c, Ship, []sdk.StartParams[OrderIn]{{Input: OrderIn{ID: "a"}}, {Input: OrderIn{ID: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if _, err := r.Result(ctx); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(took)
	if p90 := took[len(took)*9/10]; p90 > 500*time.Millisecond {
		t.Fatalf("Start→Result p90 %s: want well under the poll interval", p90)
	}
	if strings.Contains(log.String(), "WARN") {
		t.Fatalf("warnings with a direct listen connection:\n%s", log.String())
	}
}

// A poll-only client opens no connection of its own: Result re-reads the run
// at the poll interval.
func TestPooler_PollOnlyClientOpensNoListenConnection(t *testing.T) {
	t.Parallel()
	p := newPooled(t, func(c *runtime.Config) { c.ListenConfig, c.PollOnly = nil, true })
	c := p.client(t, sdk.WithPollOnly(), sdk.WithPollInterval(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		run, err := sdk.Start(ctx, c, Ship, OrderIn{ID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := run.Result(ctx); err != nil || out != fmt.Sprintf("shipped %d", i) {
			t.Fatalf("run %d: %q, %v", i, out, err)
		}
	}
	if pid := listener(t, p.direct, p.schema); pid != 0 {
		t.Fatalf("a poll-only client LISTENs (backend %d)", pid)
	}
}

// Through a transaction pooler without a direct connection, the client
// finds out that its notices do not arrive, says so once, and polls from
// then on: it never opens a listener again.
func TestPooler_ClientFindsOutNoticesDoNotArriveAndPolls(t *testing.T) {
	t.Parallel()
	p := newPooled(t, nil)
	var log logBuffer
	c := p.client(t, sdk.WithPollInterval(50*time.Millisecond), sdk.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const warning = "result notifications do not arrive"
	for i := 0; !strings.Contains(log.String(), warning); i++ {
		run, err := sdk.Start(ctx, c, Ship, OrderIn{ID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := run.Result(ctx); err != nil || out != fmt.Sprintf("shipped %d", i) {
			t.Fatalf("run %d: %q, %v", i, out, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sdk.SetListenIdle(c, 10*time.Millisecond) // a listener, if one started, would restart for every Result
	for i := range 5 {
		run, err := sdk.Start(ctx, c, Ship, OrderIn{ID: fmt.Sprint("after-", i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Result(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(log.String(), warning); n != 1 {
		t.Fatalf("the warning was logged %d times:\n%s", n, log.String())
	}
	for _, want := range []string{"pool_mode=transaction", "sdk.WithListenConfig", "sdk.WithPollOnly"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the warning lacks %q:\n%s", want, log.String())
		}
	}
}
