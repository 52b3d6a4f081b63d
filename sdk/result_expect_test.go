package sdk_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// reads counts the run reads (Result's) sent on a pool.
type reads struct{ n atomic.Int64 }

func (r *reads) count(sql string) {
	if strings.Contains(sql, "f.id IS NOT NULL") { // the run's read (store.GetRun)
		r.n.Add(1)
	}
}

func (r *reads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.count(d.SQL)
	return ctx
}
func (r *reads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *reads) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (r *reads) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.count(d.SQL)
}
func (r *reads) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// expectingClient is a client whose LISTEN is in effect (a first run was
// awaited), with a poll interval of a minute, and a count of its reads.
func expectingClient(t *testing.T, opts ...sdk.ClientOption) (*sdk.Client, *pgxpool.Pool, string, *reads) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	counter := &reads{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.NewClient(pool, append([]sdk.ClientOption{sdk.WithSchema(schema), sdk.WithPollInterval(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// As long as the poll: a Result that waits for a notice instead of
	// reading takes a minute, which resultAtOnce tells from a read.
	sdk.SetExpectedWait(c, time.Minute)
	first, err := sdk.Start(t.Context(), c, Ship, OrderIn{})
	if err != nil {
		t.Fatal(err)
	}
	complete(t, pool, schema, first.ID)
	if _, err := first.Result(t.Context()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !sdk.Listening(c); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the client's LISTEN never took effect")
		}
	}
	return c, pool, schema, counter
}

// until waits for cond, failing with what when ctx ends first.
func until(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatal(what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// resultAtOnce requires run's Result to return well before the poll
// interval (a minute in these tests): it read the run instead of waiting.
func resultAtOnce(t *testing.T, ctx context.Context, run *sdk.Run[string]) {
	t.Helper()
	begin := time.Now()
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Fatalf("Result took %s", took)
	}
}

// startExpected starts a run on c, which must expect its end's notice as
// expect says.
func startExpected(t *testing.T, ctx context.Context, c *sdk.Client, expect bool) *sdk.Run[string] {
	t.Helper()
	run, err := sdk.Start(ctx, c, Ship, OrderIn{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sdk.Expected(c, run.ID); got != expect {
		t.Fatalf("run started: expected to notify its end %v, want %v", got, expect)
	}
	return run
}

// notify sends the end notice of run id, as a worker's commit does.
func notify(t *testing.T, pool *pgxpool.Pool, schema string, id string) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), "SELECT pg_notify($1, $2)", schema+"_done", id); err != nil {
		t.Fatal(err)
	}
}

// A run this client started while its LISTEN was in effect cannot end
// unnoticed: Result waits for the notice and reads the run once, after it.
func TestResult_ARunStartedWhileListeningIsReadOnlyAfterItsNotice(t *testing.T) {
	t.Parallel()
	c, pool, schema, counter := expectingClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	run := startExpected(t, ctx, c, true)
	before := counter.n.Load()
	waiting := result(ctx, run)
	time.Sleep(100 * time.Millisecond)
	if n := counter.n.Load() - before; n != 0 {
		t.Fatalf("%d reads before the run's notice, want 0", n)
	}
	complete(t, pool, schema, run.ID)
	notify(t, pool, schema, run.ID.String())
	if err := <-waiting; err != nil {
		t.Fatalf("Result: %v", err)
	}
	if n := counter.n.Load() - before; n != 1 {
		t.Fatalf("%d reads for one Result, want 1", n)
	}
	// A second Result on the same handle reads first, as any does.
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}
}

// A run whose end was notified before Result was called is read at once:
// the notice removed its expectation (a wait for a notice already gone
// would last the poll interval, a minute here).
func TestResult_ARunNotifiedBeforeResultIsReadAtOnce(t *testing.T) {
	t.Parallel()
	c, pool, schema, _ := expectingClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	run := startExpected(t, ctx, c, true)
	complete(t, pool, schema, run.ID)
	notify(t, pool, schema, run.ID.String())
	until(t, ctx, "the notice never arrived", func() bool { return !sdk.Expected(c, run.ID) })
	resultAtOnce(t, ctx, run)
}

// A lost LISTEN connection may have lost notices: its loss drops every
// expectation, and a run that ended meanwhile, unnotified, is read.
func TestResult_ANewListenDropsTheExpectations(t *testing.T) {
	t.Parallel()
	c, pool, schema, _ := expectingClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	run := startExpected(t, ctx, c, true)
	complete(t, pool, schema, run.ID) // its notice is lost with the connection
	if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", listener(t, pool, schema)); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the lost LISTEN kept the expectation", func() bool { return !sdk.Expected(c, run.ID) })
	resultAtOnce(t, ctx, run)
}

// While the LISTEN connection is lost (here: its role may no longer log in,
// so it cannot come back), notices are missed: no run started meanwhile is
// expected, and Result reads it at once.
func TestResult_NoRunIsExpectedWhileTheListenConnectionIsLost(t *testing.T) {
	t.Parallel()
	admin := pgtest.Pool(t)
	role := "tenure_listen_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := admin.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	listen, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	listen.User = role
	c, pool, schema, _ := expectingClient(t, sdk.WithListenConfig(listen))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, "ALTER ROLE "+role+" NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", listener(t, pool, schema)); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the lost LISTEN connection still counts as listening", func() bool { return !sdk.Listening(c) })
	run := startExpected(t, ctx, c, false) // notices cannot arrive now
	complete(t, pool, schema, run.ID)      // no notice could reach the client anyway
	resultAtOnce(t, ctx, run)
}
