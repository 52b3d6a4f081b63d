package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// Every worker goroutine has an owner that waits for it: none may outlive its test.
func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }

// env is one test's isolated Tenure: a migrated schema, a pool and a client.
type env struct {
	t      testing.TB
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	client *sdk.Client
	op     *operator.Operator
	store  *store.Store
	gates  []*gate
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 30
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := pgtest.Schema(t)
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, pool: pool, schema: schema, store: st, client: client, op: op}
}

// config is a worker configuration fast enough for tests.
func (e *env) config() runtime.Config {
	return runtime.Config{
		Schema:            e.schema,
		Concurrency:       8,
		LeaseTTL:          5 * time.Second,
		HeartbeatInterval: time.Second,
		PollInterval:      20 * time.Millisecond,
		MaxInProcessSleep: time.Second,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// worker starts a worker with the given workflows; it is shut down at cleanup.
func (e *env) worker(cfg runtime.Config, defs ...sdk.Definition) *runtime.Worker {
	e.t.Helper()
	return e.workerCtx(e.ctx, cfg, defs...)
}

// workerCtx is worker started with ctx's values (such as an override table).
func (e *env) workerCtx(ctx context.Context, cfg runtime.Config, defs ...sdk.Definition) *runtime.Worker {
	e.t.Helper()
	return e.workerOnCtx(ctx, e.pool, cfg, defs...)
}

// workerOn is worker on pool (a traced one, say) instead of e's.
func (e *env) workerOn(pool *pgxpool.Pool, cfg runtime.Config, defs ...sdk.Definition) *runtime.Worker {
	e.t.Helper()
	return e.workerOnCtx(e.ctx, pool, cfg, defs...)
}

func (e *env) workerOnCtx(ctx context.Context, pool *pgxpool.Pool, cfg runtime.Config, defs ...sdk.Definition) *runtime.Worker {
	e.t.Helper()
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Register(defs...); err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		e.t.Fatalf("worker %s: Start: %v", w.Label(), err)
	}
	e.t.Cleanup(func() {
		for _, g := range e.gates {
			g.release() // a worker's hung attempts end before it shuts down
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			e.t.Errorf("worker %s: Shutdown: %v", w.Label(), err)
		}
	})
	return w
}

// stop shuts a worker down now, interrupting what it runs after drain.
func stop(t testing.TB, w *runtime.Worker, drain time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	_ = w.Shutdown(ctx)
}

// result waits for a run's result with a test timeout.
func result[Out any](t *testing.T, r *sdk.Run[Out]) (Out, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := r.Result(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("run %s: no result in 30s", r.ID)
	}
	return out, err
}

// eventually polls cond until it holds or fails the test after 20s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expireLease moves a running run's lease expiry into the past, as if its
// worker had stopped heartbeating.
func (e *env) expireLease(id uuid.UUID) {
	e.t.Helper()
	tag, err := e.pool.Exec(e.ctx, fmt.Sprintf(`UPDATE %s.runs SET lease_expires_at = now() - interval '1 second' WHERE id = $1 AND status = 'running'`, e.schema), id)
	if err != nil || tag.RowsAffected() != 1 {
		e.t.Fatalf("expire lease of %s: %v (%d rows)", id, err, tag.RowsAffected())
	}
}

// scalar runs a query returning one value.
func scalar[T any](e *env, query string, args ...any) T {
	e.t.Helper()
	var v T
	if err := e.pool.QueryRow(e.ctx, query, args...).Scan(&v); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return v
}

// runStatus reads a run's status.
func (e *env) runStatus(id uuid.UUID) string {
	return scalar[string](e, fmt.Sprintf(`SELECT status FROM %s.runs WHERE id = $1`, e.schema), id)
}

// epoch reads a run's lease epoch.
func (e *env) epoch(id uuid.UUID) int64 {
	return scalar[int64](e, fmt.Sprintf(`SELECT epoch FROM %s.runs WHERE id = $1`, e.schema), id)
}

// statuses lists the attempt statuses of a run, in order.
func (e *env) statuses(id uuid.UUID) []string {
	e.t.Helper()
	h, err := e.op.History(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, a := range h {
		out = append(out, fmt.Sprintf("%d.%d:%s", a.Step, a.Attempt, a.Status))
	}
	return out
}

// ledger counts real invocations in a table, through its own connection
// (never the step's transaction), like a remote system would see them.
type ledger struct {
	e *env
}

func newLedger(e *env) *ledger {
	e.t.Helper()
	if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`CREATE TABLE %s.ledger (key text NOT NULL, at timestamptz NOT NULL DEFAULT now())`, e.schema)); err != nil {
		e.t.Fatal(err)
	}
	return &ledger{e: e}
}

func (l *ledger) record(ctx context.Context, key string) error {
	_, err := l.e.pool.Exec(context.WithoutCancel(ctx), fmt.Sprintf(`INSERT INTO %s.ledger (key) VALUES ($1)`, l.e.schema), key)
	return err
}

func (l *ledger) count(key string) int {
	return scalar[int](l.e, fmt.Sprintf(`SELECT count(*) FROM %s.ledger WHERE key = $1`, l.e.schema), key)
}

// gate blocks activity attempts until opened, and reports when one is waiting.
type gate struct {
	open    chan struct{}
	once    sync.Once
	waiting atomic.Int32
}

func newGate(e *env) *gate {
	g := &gate{open: make(chan struct{})}
	e.gates = append(e.gates, g)
	return g
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// wait blocks until the gate opens (ignoring ctx: a frozen or dying worker
// does not notice cancellation either).
func (g *gate) wait() {
	g.waiting.Add(1)
	<-g.open
}

// matching counts the statements sent on a pool, batched or not, whose SQL
// contains substr (a tracer for tracedPool).
type matching struct {
	substr string
	n      atomic.Int64
}

func (m *matching) count(sql string) {
	if strings.Contains(sql, m.substr) {
		m.n.Add(1)
	}
}
func (m *matching) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	m.count(d.SQL)
	return ctx
}
func (m *matching) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (m *matching) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (m *matching) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	m.count(d.SQL)
}
func (m *matching) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// tracedPool is a pool on e's database whose every connection (a worker's
// own, its committer's and heartbeat's included) reports its statements to
// tracer; closed at the test's end.
func (e *env) tracedPool(t testing.TB, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(e.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
