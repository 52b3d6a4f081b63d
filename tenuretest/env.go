package tenuretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/override"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// Env is one test's own Tenure: a migrated schema that no other test sees, a
// pool, a client and (when the test registers workflows) a started worker.
// Tests with an Env each may run in parallel. Everything is stopped and the
// schema dropped when the test ends.
type Env struct {
	// Schema is the env's schema, created for the test and dropped after it.
	// It is first on the pool's search_path (then public), so tables the
	// test and its activities create without a schema are the test's own.
	Schema string
	// Pool is a pool on the test database, closed after the test.
	Pool *pgxpool.Pool
	// Client starts runs in Schema and waits for them.
	Client *sdk.Client
	// Operator inspects, requeues, cancels and purges runs in Schema.
	Operator *operator.Operator
	// Worker is the started worker running the workflows of Workflows, with
	// the activities of Override and OverrideTx replaced; nil when the test
	// registered no workflow.
	Worker *runtime.Worker

	t         TB
	store     *store.Store
	timeout   time.Duration
	workflows map[string]bool // registered on Worker
}

// Option configures New.
type Option func(*settings)

type settings struct {
	workflows []sdk.Definition
	overrides []replacement
	configure []func(*runtime.Config)
	client    []sdk.ClientOption
	timeout   time.Duration
	errs      []error
}

// Workflows registers workflows on the env's worker. Without any, New starts
// no worker: the env is a client on a migrated schema.
func Workflows(defs ...sdk.Definition) Option {
	return func(s *settings) { s.workflows = append(s.workflows, defs...) }
}

// Configure changes the worker's configuration after the kit's defaults
// (see New), e.g. to set Concurrency or an Observer. Schema is the env's and
// may not be changed.
func Configure(fn func(*runtime.Config)) Option {
	return func(s *settings) { s.configure = append(s.configure, fn) }
}

// ClientOptions adds options to the env's client, after the kit's own
// (WithSchema, which may not be changed, and a poll interval of 50ms).
func ClientOptions(opts ...sdk.ClientOption) Option {
	return func(s *settings) { s.client = append(s.client, opts...) }
}

// Timeout sets how long Result and RequireFailed wait for a run to end
// before they fail the test. Default 30s.
func Timeout(d time.Duration) Option {
	return func(s *settings) {
		if d <= 0 {
			s.errs = append(s.errs, fmt.Errorf("Timeout(%s): must be positive", d))
		}
		s.timeout = d
	}
}

// opTimeout bounds the kit's own statements: migration, schema drop, reads.
const opTimeout = 30 * time.Second

// New returns a test's Env on the test database (see URL): a schema of its
// own, migrated, with a pool, a client and, when Workflows names any, a
// worker that is already running. Everything is stopped at the test's
// cleanup: the worker first, interrupting what it still runs (a test is
// over once its assertions are), then the client, then the schema is
// dropped and the pool closed. New fails the test on any error.
//
// The worker's timings suit tests: a lease of 5s renewed every 500ms, a
// poll every 20ms (new runs are also announced by NOTIFY), Concurrency 8,
// and its log going to the test's log (shown by go test -v or when the
// test fails). Change them with Configure.
func New(t TB, opts ...Option) *Env {
	t.Helper()
	s := settings{timeout: 30 * time.Second}
	for _, opt := range opts {
		opt(&s)
	}
	table, err := s.table()
	if err = errors.Join(append(s.errs, err)...); err != nil {
		t.Fatalf("tenuretest.New: %v", err)
	}
	e := &Env{t: t, timeout: s.timeout, Schema: "tt_" + randomHex(6)}

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatalf("tenuretest: %s: %v", EnvVar, err)
	}
	cfg.MaxConns = 16
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{e.Schema}.Sanitize() + ", public"
	if e.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatalf("tenuretest: open pool: %v", err)
	}
	t.Cleanup(e.closePool)
	if err := store.Migrate(ctx, e.Pool, store.WithSchema(e.Schema)); err != nil {
		t.Fatalf("tenuretest: migrate schema %s: %v", e.Schema, err)
	}
	t.Cleanup(e.dropSchema)
	if e.store, err = store.New(e.Pool, store.WithSchema(e.Schema)); err != nil {
		t.Fatalf("tenuretest: %v", err)
	}

	log := &testLog{t: t}
	t.Cleanup(log.close) // after the worker stopped: a test may not log once it is over
	copts := append([]sdk.ClientOption{sdk.WithPollInterval(50 * time.Millisecond)}, s.client...)
	if e.Client, err = sdk.NewClient(e.Pool, append(copts, sdk.WithSchema(e.Schema))...); err != nil {
		t.Fatalf("tenuretest: %v", err)
	}
	t.Cleanup(e.Client.Close)
	if e.Operator, err = operator.New(e.Pool, operator.WithSchema(e.Schema)); err != nil {
		t.Fatalf("tenuretest: %v", err)
	}

	if len(s.workflows) == 0 {
		return e
	}
	wcfg := runtime.Config{
		Concurrency:       8,
		LeaseTTL:          5 * time.Second,
		HeartbeatInterval: 500 * time.Millisecond,
		PollInterval:      20 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(log, nil)),
	}
	for _, fn := range s.configure {
		fn(&wcfg)
	}
	if wcfg.Schema != "" && wcfg.Schema != e.Schema {
		t.Fatalf("tenuretest: Configure set Schema %q: the env's schema is its own (%s)", wcfg.Schema, e.Schema)
	}
	wcfg.Schema = e.Schema
	w, err := runtime.NewWorker(e.Pool, wcfg)
	if err != nil {
		t.Fatalf("tenuretest: %v", err)
	}
	if err := w.Register(s.workflows...); err != nil {
		t.Fatalf("tenuretest: %v", err)
	}
	if err := w.Start(override.With(context.Background(), table)); err != nil {
		t.Fatalf("tenuretest: start worker: %v", err)
	}
	e.Worker = w
	e.workflows = map[string]bool{}
	for _, d := range s.workflows {
		e.workflows[d.Name()] = true
	}
	t.Cleanup(e.stopWorker)
	return e
}

// stopWorker interrupts what the worker still runs and waits for it to stop.
func (e *Env) stopWorker() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no drain: the test is over
	if err := e.Worker.Shutdown(ctx); err != nil && err != ctx.Err() {
		e.t.Errorf("tenuretest: stop worker: %v (an activity that ignores its context outlives the test)", err)
	}
}

// closePool closes the pool, waiting a few seconds at most: a transaction
// an activity still holds (one that ignores its context) keeps its
// connection, and Pool.Close would wait for it for ever.
func (e *Env) closePool() {
	done := make(chan struct{})
	go func() { e.Pool.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		e.t.Errorf("tenuretest: the pool did not close in 5s: an activity still holds a connection (it ignores its context)")
	}
}

func (e *Env) dropSchema() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	// A lock held by an activity that outlived the test must not hold the
	// drop for opTimeout.
	drop := "SET LOCAL lock_timeout = '2s'; DROP SCHEMA IF EXISTS " + pgx.Identifier{e.Schema}.Sanitize() + " CASCADE"
	if _, err := e.Pool.Exec(ctx, "BEGIN; "+drop+"; COMMIT"); err != nil {
		e.t.Errorf("tenuretest: drop schema %s: %v", e.Schema, err)
	}
}

// randomHex returns n random bytes, hex encoded.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
