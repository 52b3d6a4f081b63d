package store_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
)

// pooledStore returns a store on a migrated schema of its own, reached
// through a pgbouncer in transaction mode with the given exec mode ("" for
// pgx's default).
func pooledStore(t *testing.T, execMode string) *store.Store {
	t.Helper()
	url := pgtest.Pgbouncer(t, pgtest.URL(t), "transaction")
	if execMode != "" {
		url += "&default_query_exec_mode=" + execMode
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8 // more clients than pgbouncer has server connections
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatalf("migrate through pgbouncer (%s): %v", execMode, err)
	}
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Every statement of the store, the worker's writes and the operator's
// reads, works through pgbouncer in transaction mode in each of the exec
// modes docs/operations.md recommends, with clients sharing its few server
// connections; JSON and UUIDs arrive intact.
func TestPooler_EveryStatementWorksThroughTransactionPgbouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cache_describe", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := pooledStore(t, mode)
			if err := store.Migrate(ctx, st.Pool(), store.WithSchema(st.Schema())); err != nil {
				t.Fatalf("migrate again: %v", err)
			}
			if err := st.Check(ctx); err != nil {
				t.Fatal(err)
			}
			h := newHistory(t, st)
			var wg sync.WaitGroup
			for range 4 { // concurrent writers: the pool's connections really share server connections
				wg.Go(func() {
					h.run(outcome{workflow: "orders", activity: "charge", errors: 1})
					h.run(outcome{workflow: "orders", activity: "charge", errors: 2, reason: "retries_exhausted"})
				})
			}
			wg.Wait()

			keyed := newRun("orders", "order-1")
			keyed.Input = []byte(`{"id": "A-1", "note": "a \"quoted\", {braced} value", "n": [1, 2]}`)
			again := newRun("orders", "order-1") // the same key again: the first run holds it
			again.Input = keyed.Input
			for _, r := range []store.NewRun{keyed, again} {
				out, err := st.InsertRunsBounded(ctx, []store.NewRun{r, newRun("orders", "")}, time.Second)
				if err != nil || out[0].ID != keyed.ID || out[0].Created != (r.ID == keyed.ID) {
					t.Fatalf("insert runs bounded: %+v, %v", out, err)
				}
			}
			retried := newRun("orders", "") // a Start sent again after a commit it did not see
			for range 2 {
				if out, err := st.InsertRuns(ctx, st.Pool(), []store.NewRun{retried}); err != nil || !out[0].Created || out[0].ID != retried.ID {
					t.Fatalf("insert runs again: %+v, %v", out, err)
				}
			}
			run, err := st.GetRun(ctx, keyed.ID)
			if err != nil || string(run.Input) != `{"n": [1, 2], "id": "A-1", "note": "a \"quoted\", {braced} value"}` {
				t.Fatalf("get run: %s, %v", run.Input, err)
			}
			if _, err := st.CancelRun(ctx, keyed.ID); err != nil {
				t.Fatal(err)
			}

			runs, err := st.ListRuns(ctx, store.RunFilter{})
			if err != nil || len(runs) != 12 {
				t.Fatalf("list runs: %d, %v", len(runs), err)
			}
			failures, err := st.Failures(ctx, store.FailureFilter{Activity: "charge"})
			if err != nil || len(failures) != 4 {
				t.Fatalf("failures: %d, %v", len(failures), err)
			}
			failed := failures[0].RunID
			if a, err := st.Attempts(ctx, failed); err != nil || len(a) != 2 {
				t.Fatalf("attempts: %+v, %v", a, err)
			}
			if s, err := st.StepRecords(ctx, failed); err != nil || len(s) != 1 || len(s[0].Policy) == 0 {
				t.Fatalf("step records: %+v, %v", s, err)
			}
			if c, err := st.FailureCounts(ctx, time.Hour, time.Now().Add(-time.Hour)); err != nil || len(c) == 0 {
				t.Fatalf("failure counts: %+v, %v", c, err)
			}
			if err := st.RequeueRunWithNote(ctx, failed, "through pgbouncer"); err != nil {
				t.Fatal(err)
			}
			got, err := st.RequeueFailures(ctx, store.RequeueFilter{Activity: "charge"}, store.RequeueOptions{BatchSize: 1, Note: "rest"})
			if err != nil || len(got) != 3 {
				t.Fatalf("requeue failures: %d, %v", len(got), err)
			}
			if a, err := st.AuditLog(ctx, 0); err != nil || len(a) != 4 {
				t.Fatalf("audit log: %d, %v", len(a), err)
			}
			if p, err := st.PurgeCompleted(ctx, store.PurgeOptions{Note: "retention"}); err != nil || p.Runs != 5 {
				t.Fatalf("purge: %+v, %v", p, err)
			}
		})
	}
}

// With pgx's default exec mode, prepared statements meet another client's
// on the shared server connections: the error names the cause and the fix,
// for the store's statements and for Migrate alike.
func TestPooler_DefaultExecModeThroughTransactionPgbouncerNamesTheFix(t *testing.T) {
	t.Parallel()
	url := pgtest.Pgbouncer(t, pgtest.URL(t), "transaction")
	schema := pgtest.Schema(t)
	direct := pgtest.Pool(t)
	if err := store.Migrate(t.Context(), direct, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	run := newRun("orders", "")
	st, err := store.New(direct, store.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := st.InsertRun(t.Context(), direct, run); err != nil {
		t.Fatal(err)
	}

	// Clients one after another: pgbouncer gives each a server connection
	// on which an earlier client prepared the same statement.
	var getErr, migrateErr error
	for i := 0; i < 2*pgtest.PgbouncerPoolSize && (getErr == nil || migrateErr == nil); i++ {
		pool, err := pgxpool.New(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.New(pool, store.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.GetRun(t.Context(), run.ID); err != nil && getErr == nil {
			getErr = err
		}
		if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil && migrateErr == nil {
			migrateErr = err
		}
		pool.Close()
	}
	for what, err := range map[string]error{"get run": getErr, "migrate": migrateErr} {
		if !errors.Is(err, store.ErrTransactionPooler) {
			t.Fatalf("%s through transaction pgbouncer in the default exec mode: %v; want ErrTransactionPooler", what, err)
		}
		for _, want := range []string{"transaction pooler", "default_query_exec_mode=cache_describe", "prepared statement"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", what, err, want)
			}
		}
	}
	t.Logf("the error reads: %v", getErr)
}

// Session mode keeps a client on one server connection: pgx's default exec
// mode works unchanged.
func TestPooler_SessionPgbouncerNeedsNoSettings(t *testing.T) {
	t.Parallel()
	url := pgtest.Pgbouncer(t, pgtest.URL(t), "session")
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	newHistory(t, st).run(outcome{workflow: "orders", activity: "charge", errors: 1})
	if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.runs WHERE status = 'completed'`); n != 1 {
		t.Fatalf("%d completed runs", n)
	}
}
