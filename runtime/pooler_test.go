package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// logBuffer collects what a logger writes, for tests that read the log.
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

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// pooledEnv is an env whose pool and client go through a pgbouncer in
// transaction mode with the given exec mode; the schema is migrated through
// it too.
func pooledEnv(t *testing.T, execMode string, clientOpts ...sdk.ClientOption) *env {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.Pgbouncer(t, pgtest.URL(t), "transaction") + "&default_query_exec_mode=" + execMode)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20 // clients far outnumber pgbouncer's server connections
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatalf("migrate through pgbouncer: %v", err)
	}
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	opts := append([]sdk.ClientOption{sdk.WithSchema(schema), sdk.WithPollInterval(50 * time.Millisecond)}, clientOpts...)
	client, err := sdk.NewClient(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return &env{t: t, ctx: t.Context(), pool: pool, schema: schema, store: st, client: client}
}

type order struct {
	N    int
	Note string
}

// A worker and a client whose pool goes through pgbouncer in transaction
// mode complete 50 runs of three steps (one retried once, one
// transactional), whether they LISTEN on a direct connection, poll only, or
// find out by themselves that notifications do not arrive (and say so once).
func TestPooler_WorkerCompletesRunsThroughTransactionPgbouncer(t *testing.T) {
	t.Parallel()
	direct, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, execMode string
		worker         func(*runtime.Config)
		client         []sdk.ClientOption
		detected       bool // the listeners find that notices do not arrive
	}{
		{name: "cache_describe/direct-listen", execMode: "cache_describe",
			worker: func(c *runtime.Config) { c.ListenConfig = direct },
			client: []sdk.ClientOption{sdk.WithListenConfig(direct)}},
		{name: "exec/poll-only", execMode: "exec",
			worker: func(c *runtime.Config) { c.PollOnly = true },
			client: []sdk.ClientOption{sdk.WithPollOnly()}},
		{name: "simple_protocol/listen-through-pgbouncer", execMode: "simple_protocol",
			worker: func(*runtime.Config) {}, detected: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var workerLog, clientLog logBuffer
			e := pooledEnv(t, c.execMode, append(c.client, sdk.WithLogger(clientLog.logger()))...)
			if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`CREATE TABLE %s.orders (n int PRIMARY KEY, note jsonb NOT NULL)`, e.schema)); err != nil {
				t.Fatal(err)
			}
			reserve := activities.New("reserve", func(ctx context.Context, o order) (order, error) {
				o.Note = "reserved"
				return o, nil
			})
			var failed sync.Map
			charge := activities.New("charge", func(ctx context.Context, o order) (order, error) {
				if _, again := failed.LoadOrStore(o.N, true); !again {
					return o, errors.New("card processor: 503")
				}
				o.Note += `, charged "in full"`
				return o, nil
			}, policy.MaxAttempts(3), policy.Constant(5*time.Millisecond), policy.Jitter(policy.NoJitter))
			record := activities.NewTx("record", func(ctx context.Context, tx pgx.Tx, o order) (order, error) {
				_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.orders VALUES ($1, jsonb_build_object('note', $2::text))`, e.schema), o.N, o.Note)
				return o, err
			})
			wf := sdk.NewWorkflow("place-order", func(ctx context.Context, o order) (order, error) {
				for _, act := range []*activities.Activity[order, order]{reserve, charge, record} {
					var err error
					if o, err = sdk.Execute(ctx, act, o); err != nil {
						return o, err
					}
				}
				return o, nil
			})
			cfg := e.config()
			cfg.Logger = workerLog.logger()
			c.worker(&cfg)
			w := e.worker(cfg, wf)

			// Half started together, half by concurrent Starts sharing commits.
			const n = 50
			var params []sdk.StartParams[order]
			for i := range n / 2 {
				params = append(params, sdk.StartParams[order]{Input: order{N: i}, Options: []sdk.StartOption{sdk.WithKey(fmt.Sprint("order-", i))}})
			}
			runs, err := sdk.StartMany(e.ctx, e.client, wf, params)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var starts sync.WaitGroup
			for i := n / 2; i < n; i++ {
				starts.Go(func() {
					r, err := sdk.Start(e.ctx, e.client, wf, order{N: i})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					runs = append(runs, r)
					mu.Unlock()
				})
			}
			starts.Wait()
			if t.Failed() {
				return
			}
			var done atomic.Int32
			var results sync.WaitGroup
			ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
			defer cancel()
			for _, r := range runs {
				results.Go(func() {
					out, err := r.Result(ctx)
					if err != nil || out.Note != `reserved, charged "in full"` {
						t.Errorf("run %s: %+v, %v", r.ID, out, err)
						return
					}
					done.Add(1)
				})
			}
			results.Wait()
			if done.Load() != n {
				t.Fatalf("%d of %d runs completed; the worker logged:\n%s", done.Load(), n, workerLog.String())
			}
			if got := scalar[int](e, fmt.Sprintf(`SELECT count(DISTINCT n) FROM %s.orders WHERE note->>'note' = 'reserved, charged "in full"'`, e.schema)); got != n {
				t.Fatalf("%d order rows, want %d: each transactional step commits exactly once", got, n)
			}
			// A run's end is counted once its commit returns, which may be
			// after its waiter was woken.
			eventually(t, "the worker's count of completed runs", func() bool { return w.Stats().Completed == n })
			if s := w.Stats(); s.Attempts != 4*n {
				t.Fatalf("stats %+v, want %d attempts", s, 4*n)
			}

			const warning = "do not arrive"
			if !c.detected {
				if strings.Contains(workerLog.String(), warning) || strings.Contains(clientLog.String(), warning) {
					t.Fatalf("a listener found its notices missing:\n%s%s", workerLog.String(), clientLog.String())
				}
				return
			}
			// The probe waits 5s: by then every run has long completed by polling.
			eventually(t, "the listeners' warnings", func() bool {
				return strings.Contains(workerLog.String(), warning) && strings.Contains(clientLog.String(), warning)
			})
			for who, log := range map[string]string{"worker": workerLog.String(), "client": clientLog.String()} {
				if k := strings.Count(log, warning); k != 1 {
					t.Errorf("%s logged the warning %d times:\n%s", who, k, log)
				}
				if !strings.Contains(log, "pool_mode=transaction") || !strings.Contains(log, "ListenConfig") {
					t.Errorf("%s's warning names neither the cause nor the fix:\n%s", who, log)
				}
			}
		})
	}
}

// A worker whose pool uses pgx's default exec mode through a transaction
// pooler fails with an error that names the cause and the fix, at start-up
// or at its first claims, rather than with pgx's bare 42P05.
func TestPooler_WorkerInDefaultExecModeNamesTheFix(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // migrated directly
	url := pgtest.Pgbouncer(t, pgtest.URL(t), "transaction")
	var errs []error
	for i := 0; i < 2*pgtest.PgbouncerPoolSize; i++ { // clients one after another meet each other's statements
		pool, err := pgxpool.New(e.ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		var log logBuffer
		cfg := e.config()
		cfg.Logger = log.logger()
		cfg.PollOnly = true
		w, err := runtime.NewWorker(pool, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Register(oneStep(activities.New("noop", func(ctx context.Context, x in) (int, error) { return x.N, nil }))); err != nil {
			t.Fatal(err)
		}
		err = w.Start(e.ctx)
		if err == nil {
			time.Sleep(100 * time.Millisecond) // a few claims
			_ = w.Shutdown(e.ctx)
			if strings.Contains(log.String(), store.ErrTransactionPooler.Error()) {
				err = errors.New(log.String())
			}
		}
		pool.Close()
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		t.Fatal("no worker met another's prepared statement through pgbouncer")
	}
	t.Logf("%d of %d workers failed; the first with: %v", len(errs), 2*pgtest.PgbouncerPoolSize, errs[0])
	for _, err := range errs {
		if !strings.Contains(err.Error(), "default_query_exec_mode=cache_describe") || !strings.Contains(err.Error(), "transaction pooler") {
			t.Fatalf("error %q does not name the cause and the fix", err)
		}
	}
}

// PollOnly and ListenConfig contradict each other: the configuration is
// refused.
func TestConfig_PollOnlyAndListenConfigAreExclusive(t *testing.T) {
	t.Parallel()
	direct, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(pgtest.Pool(t), runtime.Config{PollOnly: true, ListenConfig: direct})
	if w != nil || err == nil || !strings.Contains(err.Error(), "exclusive") {
		t.Fatalf("NewWorker with PollOnly and ListenConfig: %v, %v", w, err)
	}
}
