package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/store"
)

// statements records the SQL of every statement a pool sends, alone or in
// a batch.
type statements struct {
	mu  sync.Mutex
	sql []string
}

func (s *statements) add(sql string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sql = append(s.sql, sql)
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.add(d.SQL)
	return ctx
}
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (s *statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.add(d.SQL)
}
func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// since returns the statements recorded from the n-th on that contain any
// of words.
func (s *statements) since(n int, words ...string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, q := range s.sql[n:] {
		for _, w := range words {
			if strings.Contains(q, w) {
				out = append(out, q)
				break
			}
		}
	}
	return out
}

func (s *statements) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sql)
}

// awaitSetup is an operator on a migrated schema whose pool records its
// statements, and a function that ends a queued run as a worker does: its
// row completed with output, then the notice on the done channel.
func awaitSetup(t *testing.T) (*operator.Operator, *statements, func(id uuid.UUID), func(sql string, args ...any)) {
	t.Helper()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	rec := &statements{}
	cfg.ConnConfig.Tracer = rec
	traced, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	op, err := operator.New(traced, operator.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), strings.ReplaceAll(sql, "{schema}", schema), args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	end := func(id uuid.UUID) {
		exec(`UPDATE {schema}.runs SET status = 'completed', output = '{"shipped": true}', finished_at = now() WHERE id = $1`, id)
		exec(`SELECT pg_notify($1, $2)`, schema+"_done", uuid.NewString()+","+id.String())
	}
	return op, rec, end, exec
}

// TestAwaitRun_WakesOnTheNoticeOfTheRunsEnd: with a poll of a minute, the
// wait ends as soon as the run's end is notified, once the LISTEN is in
// effect (which itself makes it read the run again).
func TestAwaitRun_WakesOnTheNoticeOfTheRunsEnd(t *testing.T) {
	op, _, end, _ := awaitSetup(t)
	started, err := op.Start(t.Context(), "ship", json.RawMessage(`{"order": 42}`), operator.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reads := make(chan record.Progress, 100)
	type outcome struct {
		r   record.Run
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := op.AwaitRun(t.Context(), started.ID, operator.AwaitOptions{Poll: time.Minute,
			Progress: func(p record.Progress) error { reads <- p; return nil }})
		done <- outcome{r, err}
	}()
	for i := range 2 { // the first read, and the one once LISTEN took effect
		select {
		case p := <-reads:
			if p.Status != record.RunQueued || p.FinishedAt != nil {
				t.Fatalf("read %d of a queued run: %+v", i+1, p)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("read %d never came: no LISTEN took effect?", i+1)
		}
	}
	sent := time.Now()
	end(started.ID)
	select {
	case o := <-done:
		if o.err != nil || o.r.Status != record.RunCompleted || string(o.r.Output) != `{"shipped": true}` || string(o.r.Input) != `{"order": 42}` {
			t.Fatalf("AwaitRun: %+v, %v", o.r, o.err)
		}
		if waited := time.Since(sent); waited > 20*time.Second {
			t.Fatalf("AwaitRun took %s after the notice", waited)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("AwaitRun did not wake on the notice (its poll is a minute)")
	}
}

// TestAwaitRun_ReadsProgressOnlyUntilTheEnd: polling, it sends only the
// progress statement, which reads no payload, until the run has ended,
// then reads the whole run once; with Steps it counts the steps that end.
func TestAwaitRun_ReadsProgressOnlyUntilTheEnd(t *testing.T) {
	op, rec, end, exec := awaitSetup(t)
	started, err := op.Start(t.Context(), "ship", json.RawMessage(`{"order": 42}`), operator.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := rec.count()
	var mu sync.Mutex
	var seen []record.Progress
	var ended sync.Once
	r, err := op.AwaitRun(t.Context(), started.ID, operator.AwaitOptions{Poll: 5 * time.Millisecond, PollOnly: true, Steps: true,
		Progress: func(p record.Progress) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, p)
			switch len(seen) {
			case 5:
				exec(`INSERT INTO {schema}.steps (run_id, step, activity, status, policy, finished_at)
					VALUES ($1, 1, 'pack', 'completed', '{}', now())`, started.ID)
			case 10:
				ended.Do(func() { end(started.ID) })
			}
			return nil
		}})
	if err != nil || r.Status != record.RunCompleted || string(r.Output) != `{"shipped": true}` {
		t.Fatalf("AwaitRun: %+v, %v", r, err)
	}
	last := seen[len(seen)-1]
	if len(seen) < 11 || seen[0].StepsEnded != 0 || seen[0].LastStepEnd != nil ||
		last.Status != record.RunCompleted || last.FinishedAt == nil || last.StepsEnded != 1 || last.LastStepEnd == nil {
		t.Fatalf("progress read: %d times, first %+v, last %+v", len(seen), seen[0], last)
	}
	if whole := rec.since(before, "r.input", "r.output"); len(whole) != 1 {
		t.Fatalf("AwaitRun read a run's payloads %d times over %d progress reads, want once at the end:\n%s",
			len(whole), len(seen), strings.Join(whole, "\n---\n"))
	}
	if steps := rec.since(before, "FROM "); len(steps) < len(seen) {
		t.Fatalf("%d statements for %d progress reads", len(steps), len(seen))
	}
}

// TestAwaitRun_ReturnsNotFoundAndCtxErrors: an unknown run is not found;
// a wait that outlasts its context returns the context's error.
func TestAwaitRun_ReturnsNotFoundAndCtxErrors(t *testing.T) {
	op, _, _, _ := awaitSetup(t)
	if _, err := op.AwaitRun(t.Context(), uuid.New(), operator.AwaitOptions{}); !errors.Is(err, operator.ErrNotFound) {
		t.Fatalf("AwaitRun of an unknown run: %v", err)
	}
	if _, err := op.AwaitRun(t.Context(), uuid.New(), operator.AwaitOptions{Poll: -1}); err == nil || !strings.Contains(err.Error(), "negative poll") {
		t.Fatalf("AwaitRun with a negative poll: %v", err)
	}
	started, err := op.Start(t.Context(), "ship", nil, operator.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := op.AwaitRun(ctx, started.ID, operator.AwaitOptions{Poll: 50 * time.Millisecond}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AwaitRun past its deadline: %v", err)
	}
}
