package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/ui"
)

// The budget of a page, 200 ms of server time with 100,000 open failures
// and 1,000,000 attempts, is measured by BenchmarkPages (speed targets live
// in benchmarks, not in timed tests): go test ./ui -run '^$' -bench Pages.
// TestPerformance_... checks the plans that make it possible, and logs the
// times it saw.

// seed fills a schema with 100,000 failed runs (five workflows, seven
// activities, messages with numbers, UUIDs and hex IDs in three shapes),
// each with one step and ten attempts (1,000,000 in all, every fourth
// lost), failing over the last 30 days; 50 runs in flight on two workers;
// 20 queued runs no worker serves; the downstream payments, with 30 queued
// runs waiting on it.
var seed = []string{
	`INSERT INTO {schema}.runs (id, workflow, queue, run_key, input, status, epoch, created_at, updated_at, started_at, finished_at)
	 SELECT {run_id}, 'wf-' || (i % 5), 'default', 'key-' || i, jsonb_build_object('order', i), 'failed', 1,
	        now() - (i % 43200) * interval '1 minute' - interval '2 minutes', now() - (i % 43200) * interval '1 minute',
	        now() - (i % 43200) * interval '1 minute' - interval '2 minutes', now() - (i % 43200) * interval '1 minute'
	 FROM generate_series(1, 100000) i`,
	`INSERT INTO {schema}.steps (run_id, step, activity, status, reason, error_message, error_type, policy, first_started_at, finished_at)
	 SELECT {run_id}, 1, 'act-' || (i % 7), 'failed', 'retries_exhausted', 'boom', 'E', $1::jsonb,
	        now() - (i % 43200) * interval '1 minute' - interval '2 minutes', now() - (i % 43200) * interval '1 minute'
	 FROM generate_series(1, 100000) i`,
	`INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, started_at, ended_at, error_message, error_type,
	                                is_rescue, delay_ms, delay_source, epoch, worker, trace_id, span_id)
	 SELECT {run_id}, 1, a, 'act-' || (i % 7), CASE WHEN a % 4 = 0 THEN 'lost' ELSE 'failed' END,
	        now() - (i % 43200) * interval '1 minute' - interval '2 minutes' + a * interval '10 seconds',
	        now() - (i % 43200) * interval '1 minute' - interval '2 minutes' + a * interval '10 seconds' + interval '2 seconds',
	        'boom', 'E', a % 4 = 1 AND a > 1, 1000 * a, 'jitter', a, 'w-' || (a % 3), lpad(to_hex(i), 32, '0'), lpad(to_hex(a), 16, '0')
	 FROM generate_series(1, 100000) i, generate_series(1, 10) a`,
	`INSERT INTO {schema}.failures (run_id, workflow, reason, step, activity, attempts, errors, rescues, error_message, error_type, failed_at)
	 SELECT {run_id}, 'wf-' || (i % 5), 'retries_exhausted', 1, 'act-' || (i % 7), 10, 8, 2,
	        CASE i % 3 WHEN 0 THEN format('charge %s declined for card %s', i, md5('c' || i)::uuid)
	                   WHEN 1 THEN format('timeout after %s ms calling 0x%s', i % 5000, substr(md5('h' || i), 1, 12))
	                   ELSE format('upstream returned 503 (request %s)', substr(md5('q' || i), 1, 16)) END,
	        CASE i % 2 WHEN 0 THEN '*net.OpError' ELSE '*errors.errorString' END,
	        now() - (i % 43200) * interval '1 minute'
	 FROM generate_series(1, 100000) i`,
	`INSERT INTO {schema}.runs (id, workflow, queue, input, status, claimant, epoch, lease_expires_at, started_at)
	 SELECT md5('flight-' || i)::uuid, 'wf-' || (i % 5), 'default', '{}', 'running', 'worker-' || (i % 2), 1,
	        now() + interval '30 seconds', now() - interval '1 minute'
	 FROM generate_series(1, 50) i`,
	`INSERT INTO {schema}.steps (run_id, step, activity, status, policy)
	 SELECT md5('flight-' || i)::uuid, 1, 'act-1', 'running', $1::jsonb FROM generate_series(1, 50) i`,
	`INSERT INTO {schema}.attempts (run_id, step, attempt, activity, status, epoch, worker)
	 SELECT md5('flight-' || i)::uuid, 1, 1, 'act-1', 'running', 1, 'worker-' || (i % 2) FROM generate_series(1, 50) i`,
	`INSERT INTO {schema}.runs (id, workflow, queue, input)
	 SELECT md5('orphan-' || i)::uuid, 'ghost', 'default', '{}' FROM generate_series(1, 20) i`,
	`SELECT {schema}.declare_downstream('payments', '{"concurrency": 4, "rate": 50, "rate_interval_ms": 1000, "burst": 10}', 'worker-0')`,
	`INSERT INTO {schema}.runs (id, workflow, queue, input, status, run_after, waiting_for, started_at)
	 SELECT md5('limited-' || i)::uuid, 'wf-' || (i % 5), 'default', '{}', 'queued', 'infinity', 'limit:payments', now() - interval '1 minute'
	 FROM generate_series(1, 30) i`,
	`INSERT INTO {schema}.throttles (run_id, step, downstream, key, cause, began_at)
	 SELECT md5('limited-' || i)::uuid, 1, 'payments', '', 'concurrency', now() - interval '1 minute' FROM generate_series(1, 30) i`,
	`INSERT INTO {schema}.workers (id, label, host, pid, version, workflows, queues, concurrency, runs_held, heartbeat_ms, lease_ttl_ms)
	 SELECT md5('worker-' || i)::uuid, 'worker-' || i, 'host-' || i, 100 + i, 'test', ARRAY['wf-0', 'wf-1', 'wf-2', 'wf-3', 'wf-4'], ARRAY['default'], 64, 25, 1000, 30000
	 FROM generate_series(0, 1) i`,
}

// seedRunID is the ID of seeded run i: in the order of i, so that the
// million attempts go to the right end of their primary key's index
// (random IDs made the seed half again as slow).
const seedRunID = `('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid`

// tracer records the statements of the requests under test.
type tracer struct {
	mu    sync.Mutex
	on    bool
	stmts []traced
}

type traced struct {
	sql  string
	args []any
}

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.on {
		tr.stmts = append(tr.stmts, traced{d.SQL, d.Args})
	}
	return ctx
}

func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Statements sent in batches (the store's reads of runs and steps, behind
// their planner settings, which are not recorded: they read nothing).
func (tr *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (tr *tracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.on && !strings.HasPrefix(d.SQL, "CALL ") {
		tr.stmts = append(tr.stmts, traced{d.SQL, d.Args})
	}
}
func (tr *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (tr *tracer) record(on bool) []traced {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.on = on
	out := tr.stmts
	tr.stmts = nil
	return out
}

// seqScan finds a sequential scan of the big tables in a plan, with its
// estimated cost. attempts is partitioned: a scan of one of its partitions
// counts when its cost says it reads more than a few pages (the seed's
// runs in flight are in a partition of a few dozen rows, which PostgreSQL
// rightly reads whole).
var seqScan = regexp.MustCompile(`Seq Scan on (failures|attempts(_[0-9a-z]+)?|runs)\b\S* (?:\S+ )?\(cost=[0-9.]+\.\.([0-9.]+)`)

// bigSeqScan is the first sequential scan of a big table in plan, or "".
func bigSeqScan(plan string) string {
	for _, m := range seqScan.FindAllStringSubmatch(plan, -1) {
		if cost, err := strconv.ParseFloat(m[3], 64); err != nil || m[2] == "" || cost > 100 {
			return m[0]
		}
	}
	return ""
}

// seeded is a schema with the seed, its pool (traced by tr), a handler on it,
// its pages and the seed's sample run.
func seeded(t testing.TB) (pool *pgxpool.Pool, tr *tracer, h http.Handler, pages []string, run string) {
	ctx := t.Context()
	schema := pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	tr = &tracer{}
	cfg.ConnConfig.Tracer = tr
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx, pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	pol, _ := json.Marshal(policy.Default())
	start := time.Now()
	for _, stmt := range seed {
		stmt = strings.ReplaceAll(stmt, "{schema}", pgx.Identifier{schema}.Sanitize())
		stmt = strings.ReplaceAll(stmt, "{run_id}", seedRunID)
		var args []any
		if strings.Contains(stmt, "$1") {
			args = []any{string(pol)}
		}
		if _, err := pool.Exec(ctx, stmt, args...); err != nil {
			t.Fatalf("seed: %v\n%s", err, stmt)
		}
	}
	// As autovacuum would: statistics, and the visibility map that lets the
	// failure groups be an index-only scan.
	for _, table := range []string{"runs", "steps", "attempts", "failures", "workers", "throttles"} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{schema, table}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seeded 100,000 failures and 1,000,000 attempts in %s", time.Since(start).Round(time.Millisecond))

	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	h, err = ui.New(ui.Config{Operator: op, Writes: true, Token: testToken, TraceURL: "https://t.example/{trace_id}"})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT "+seedRunID+"::text FROM (SELECT 1 AS i) AS one").Scan(&run); err != nil {
		t.Fatal(err)
	}
	var limited string // a run waiting on the downstream payments
	if err := pool.QueryRow(ctx, "SELECT md5('limited-1')::uuid::text").Scan(&limited); err != nil {
		t.Fatal(err)
	}
	pages = []string{
		"/", "/failures", "/failures?age=24h", "/failures?age=7d&workflow=wf-1", "/failures?activity=act-3&reason=retries_exhausted",
		"/failures?key=key-77", "/runs", "/runs?status=failed", "/runs?workflow=wf-2&status=failed", "/runs?key=key-5",
		"/runs?created_after=2000-01-01T00:00&created_before=2100-01-01T00:00", "/runs/" + run, "/workers",
		"/policy?run=" + run + "&step=1", "/downstreams", "/downstreams/payments", "/runs/" + limited,
	}
	return pool, tr, h, pages, run
}

// BenchmarkPages times every page, and the two previews of a bulk requeue,
// against the seed: 100,000 open failures, 1,000,000 attempts. The budget is
// 200 ms a page (ms/op).
func BenchmarkPages(b *testing.B) {
	_, _, h, pages, _ := seeded(b)
	for _, path := range pages {
		b.Run(strings.ReplaceAll(path, "/", "_"), func(b *testing.B) {
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
				if w.Code != http.StatusOK {
					b.Fatalf("%s: status %d", path, w.Code)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
		})
	}
}

func TestPerformance_PagesWith100kFailuresAnd1MAttempts(t *testing.T) {
	t.Parallel()
	pool, tr, h, pages, _ := seeded(t)
	// The previews of a bulk requeue: one group (about 440 failures), and a
	// filter that selects 20,000 (counted, broken down, sampled).
	csrf := strings.Repeat("ab", 32)
	group := url.Values{"csrf": {csrf}, "group": {"1"}, "fp_workflow": {"wf-1"}, "fp_activity": {"act-1"}, "fp_reason": {"retries_exhausted"},
		"fp_type": {"*errors.errorString"}, "fp_message": {"timeout after <n> ms calling <hex>"}}
	for _, form := range []url.Values{group, {"csrf": {csrf}, "workflow": {"wf-1"}}} {
		best := time.Hour
		var body string
		for range 3 {
			req := httptest.NewRequest(http.MethodPost, "/failures/requeue", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", "http://example.com")
			req.Header.Set("Authorization", "Bearer "+testToken)
			req.AddCookie(&http.Cookie{Name: "tenure_csrf", Value: csrf})
			w := httptest.NewRecorder()
			begin := time.Now()
			h.ServeHTTP(w, req)
			best = min(best, time.Since(begin))
			if w.Code != http.StatusOK {
				t.Fatalf("preview %v: %d\n%s", form, w.Code, firstLines(w.Body.String(), 40))
			}
			body = w.Body.String()
		}
		t.Logf("%-70s %8s (best of 3, %d rows)", "POST /failures/requeue "+form.Get("workflow")+form.Get("fp_message"), best.Round(100*time.Microsecond),
			count(body, `data-testid="preview-row"`))
		if count(body, `data-testid="preview-row"`) == 0 {
			t.Errorf("preview %v lists no rows", form)
		}
	}
	for _, path := range pages {
		best := time.Hour
		var stmts []traced
		for i := range 3 {
			tr.record(i == 0)
			w := httptest.NewRecorder()
			begin := time.Now()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
			best = min(best, time.Since(begin))
			if got := tr.record(false); i == 0 {
				stmts = got
			}
			if w.Code != http.StatusOK {
				t.Fatalf("%s: status %d\n%s", path, w.Code, firstLines(w.Body.String(), 40))
			}
		}
		t.Logf("%-70s %8s (best of 3)", path, best.Round(100*time.Microsecond))
		settings := ""
		for _, s := range stmts {
			sql := strings.TrimSpace(s.sql)
			if strings.HasPrefix(sql, "SET LOCAL") { // the planner settings of the next statement
				settings = sql
				continue
			}
			if !strings.HasPrefix(sql, "SELECT") && !strings.HasPrefix(sql, "WITH") {
				continue
			}
			plan := explain(t, pool, settings, sql, s.args)
			settings = ""
			if m := bigSeqScan(plan); m != "" {
				t.Errorf("%s: %s in the plan of\n%s\n%s", path, m, sql, plan)
			}
			if strings.Contains(sql, "AS message") && !strings.Contains(plan, "Index Only Scan using failures_open_fingerprint_idx") {
				t.Errorf("%s: the failure groups are not an index-only scan:\n%s", path, plan)
			}
		}
	}
}

// explain returns the plan of sql with args, under the SET LOCAL settings
// the statement ran with.
func explain(t *testing.T, pool *pgxpool.Pool, settings, sql string, args []any) string {
	t.Helper()
	var plan []string
	err := pgx.BeginTxFunc(t.Context(), pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if settings != "" {
			if _, err := tx.Exec(t.Context(), settings); err != nil {
				return err
			}
		}
		rows, err := tx.Query(t.Context(), "EXPLAIN "+sql, args...)
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	return strings.Join(plan, "\n")
}
