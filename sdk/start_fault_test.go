package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// faultClient returns a client whose connections go through a proxy that
// injects faults, the proxy, a direct pool for the test's own statements, and
// the schema. The client has checked its schema, so that the batches it
// sends from now on are the calls' own.
func faultClient(t *testing.T, opts ...sdk.ClientOption) (*sdk.Client, *proxy, *pgxpool.Pool, string) {
	t.Helper()
	schema := pgtest.Schema(t)
	direct := pgtest.Pool(t)
	if err := store.Migrate(t.Context(), direct, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	p := newProxy(t) // closed before the schema is dropped: its connections end first
	c, err := sdk.NewClient(p.pool(t, 4), append([]sdk.ClientOption{sdk.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := sdk.Lookup(t.Context(), c, Fulfil, uuid.New()); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("Lookup of an unknown run: %v, want ErrNotFound", err)
	}
	return c, p, direct, schema
}

// starter starts runs one way and returns them with whether each must be
// reported created.
type starter struct {
	name  string
	start func(ctx context.Context, c *sdk.Client) ([]*sdk.Run[string], error)
	want  []bool // Created, per run
	runs  int    // distinct runs made
}

var starters = []starter{
	{"Start", func(ctx context.Context, c *sdk.Client) ([]*sdk.Run[string], error) {
		run, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "A"})
		return []*sdk.Run[string]{run}, err
	}, []bool{true}, 1},
	{"Start with a key", func(ctx context.Context, c *sdk.Client) ([]*sdk.Run[string], error) {
		run, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "A"}, sdk.WithKey("order-A"))
		return []*sdk.Run[string]{run}, err
	}, []bool{true}, 1},
	{"StartMany", func(ctx context.Context, c *sdk.Client) ([]*sdk.Run[string], error) {
		key := []sdk.StartOption{sdk.WithKey("order-B")}
		return sdk.StartMany(ctx, c, Fulfil, []sdk.StartParams[OrderIn]{
			{Input: OrderIn{ID: "A"}}, {Input: OrderIn{ID: "B"}, Options: key}, {Input: OrderIn{ID: "B"}, Options: key},
		})
	}, []bool{true, true, false}, 2},
}

// check fails the test unless runs are what s promises: created as wanted,
// duplicates of a key sharing its run, and nothing else in the table.
func (s starter) check(t *testing.T, runs []*sdk.Run[string], err error, direct *pgxpool.Pool, schema string) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[uuid.UUID]bool{}
	for i, run := range runs {
		if run.Created != s.want[i] {
			t.Fatalf("run %d: created %v, want %v", i, run.Created, s.want[i])
		}
		ids[run.ID] = true
	}
	if len(ids) != s.runs {
		t.Fatalf("%d distinct runs returned, want %d", len(ids), s.runs)
	}
	if n := countRuns(t, direct, schema); n != s.runs {
		t.Fatalf("%d runs in the table, want %d", n, s.runs)
	}
}

// The connection is cut after the server committed the insert and before
// its answer reaches the client: the client sends the same insert again, and
// the call makes one run per element, reported created by this call.
func TestStart_UnseenCommitIsRetriedIntoOneRun(t *testing.T) {
	t.Parallel()
	for _, s := range starters {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			c, p, direct, schema := faultClient(t)
			before := p.sent()
			p.arm(cutAfter, 1, false)
			runs, err := s.start(t.Context(), c)
			committed(t, p.waitCut(t))
			s.check(t, runs, err, direct, schema)
			// (And one read: Start's check, once a minute per workflow and
			// queue, that a live worker serves the workflow.)
			if n := p.sent() - before; n != 3+1 {
				t.Fatalf("%d batches sent, want the cut one, its retry, the retry's look-up by ID and the served check", n)
			}
		})
	}
}

// The connection is cut before the server got the insert: nothing was
// committed, and the retry records the runs.
func TestStart_InsertLostBeforeTheServerIsRetried(t *testing.T) {
	t.Parallel()
	for _, s := range starters {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			c, p, direct, schema := faultClient(t)
			before := p.sent()
			p.arm(cutBefore, 1, false)
			runs, err := s.start(t.Context(), c)
			s.check(t, runs, err, direct, schema)
			if n := p.sent() - before; n != 2+1 {
				t.Fatalf("%d batches sent, want the cut one, its retry and the served check", n)
			}
		})
	}
}

// Starts sharing one commit survive it being unseen: each caller gets its
// own run, created, and there is one run per caller.
func TestStart_ConcurrentStartsSurviveAnUnseenSharedCommit(t *testing.T) {
	t.Parallel()
	c, p, direct, schema := faultClient(t)
	ctx := t.Context()
	leader, release := blockFlush(t, c, direct, schema) // the Starts below wait, then share the next flush
	const n = 20
	runs := make([]*sdk.Run[string], n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() { runs[i], errs[i] = sdk.Start(ctx, c, Fulfil, OrderIn{ID: fmt.Sprint(i)}) })
	}
	waitPending(t, c, n)
	p.arm(cutAfter, 1, false)
	release()
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	committed(t, p.waitCut(t))
	seen := map[uuid.UUID]bool{}
	for i, run := range runs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !run.Created || seen[run.ID] {
			t.Fatalf("run %d: %s created %v, seen before %v", i, run.ID, run.Created, seen[run.ID])
		}
		seen[run.ID] = true
	}
	if got := countRuns(t, direct, schema); got != n+1 {
		t.Fatalf("%d runs, want the blocker and %d", got, n)
	}
}

// A Start whose key another transaction holds inserts its run alone, after
// the shared flush gave up on the key; that insert too survives an unseen
// commit.
func TestStart_InsertAloneSurvivesAnUnseenCommit(t *testing.T) {
	t.Parallel()
	c, p, direct, schema := faultClient(t)
	ctx := t.Context()
	sdk.SetFlushLockWait(c, 50*time.Millisecond)
	held, err := direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Rollback(ctx) }()
	if _, err := sdk.StartTx(ctx, c, held, Fulfil, OrderIn{ID: "held"}, sdk.WithKey("held")); err != nil {
		t.Fatal(err)
	}
	before := p.sent()
	p.arm(cutAfter, 2, false) // 1: the shared flush, which gives up on the key; 2: the insert alone
	type result struct {
		run *sdk.Run[string]
		err error
	}
	done := make(chan result, 1)
	go func() {
		run, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "mine"}, sdk.WithKey("held"))
		done <- result{run, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var waiting bool
		err := direct.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND datname = current_database() AND query LIKE '%INSERT INTO%' || $1 || '%runs%')`, schema).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting && p.sent()-before == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the insert alone never waited for the key")
		}
	}
	if err := held.Rollback(ctx); err != nil { // the key is free: the insert alone commits
		t.Fatal(err)
	}
	committed(t, p.waitCut(t))
	r := <-done
	if r.err != nil || !r.run.Created {
		t.Fatalf("Start: %+v, %v: want the run created", r.run, r.err)
	}
	if n := countRuns(t, direct, schema); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}

// When every try is cut after its commit, Start gives up with an error that
// says the outcome is unknown and names the run, which does exist.
func TestStart_OutcomeUnknownWhenNoTrySettlesIt(t *testing.T) {
	t.Parallel()
	c, p, direct, schema := faultClient(t)
	ctx := t.Context()
	before := p.sent()
	p.arm(cutAfter, 1, true)
	_, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "A"})
	if !errors.Is(err, sdk.ErrOutcomeUnknown) {
		t.Fatalf("Start: %v, want ErrOutcomeUnknown", err)
	}
	if n := p.sent() - before; n != 4 {
		t.Fatalf("%d tries, want 4", n)
	}
	p.arm(forward, 0, false)
	var id uuid.UUID
	if err := direct.QueryRow(ctx, "SELECT id FROM "+pgx.Identifier{schema}.Sanitize()+".runs").Scan(&id); err != nil {
		t.Fatalf("the run of the first try: %v", err)
	}
	if !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("error %q does not name run %s", err, id)
	}
	if _, err := sdk.Lookup(ctx, c, Fulfil, id); err != nil {
		t.Fatal(err)
	}
}

// A statement the database refuses is not sent again.
func TestStart_RefusedInsertIsNotRetried(t *testing.T) {
	t.Parallel()
	c, p, direct, schema := faultClient(t)
	before := p.sent()
	// Valid JSON, but jsonb cannot hold a NUL character.
	_, err := sdk.Start(t.Context(), c, Fulfil, OrderIn{ID: "nul\x00"})
	if err == nil || errors.Is(err, sdk.ErrOutcomeUnknown) {
		t.Fatalf("Start: %v, want the database's refusal", err)
	}
	if n := p.sent() - before; n != 1 {
		t.Fatalf("%d batches sent, want 1", n)
	}
	if n := countRuns(t, direct, schema); n != 0 {
		t.Fatalf("%d runs, want 0", n)
	}
}

// Against a database that stopped answering, every call returns in bounded
// time with an error naming the statement timeout: Start after its tries,
// each bounded, the others after one; a caller's earlier deadline still wins.
func TestStatementTimeout_BoundsEveryCallOfAStalledDatabase(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	c, p, _, _ := faultClient(t, sdk.WithStatementTimeout(timeout))
	ctx := t.Context()
	run, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "before"})
	if err != nil {
		t.Fatal(err)
	}
	p.stall()

	calls := []struct {
		name string
		max  time.Duration // 4 tries and their pauses (1.3s at most) for Start
		call func(ctx context.Context) error
	}{
		{"Start", 4*timeout + 1300*time.Millisecond, func(ctx context.Context) error {
			_, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "stalled"})
			if !errors.Is(err, sdk.ErrOutcomeUnknown) {
				return fmt.Errorf("want ErrOutcomeUnknown: %w", err)
			}
			return err
		}},
		{"StartMany", 4*timeout + 1300*time.Millisecond, func(ctx context.Context) error {
			_, err := sdk.StartMany(ctx, c, Fulfil, []sdk.StartParams[OrderIn]{{Input: OrderIn{ID: "stalled"}}})
			return err
		}},
		{"Result", timeout, func(ctx context.Context) error { _, err := run.Result(ctx); return err }},
		{"Lookup", timeout, func(ctx context.Context) error { _, err := sdk.Lookup(ctx, c, Fulfil, run.ID); return err }},
		{"Cancel", timeout, func(ctx context.Context) error { return c.Cancel(ctx, run.ID) }},
	}
	for _, tc := range calls {
		begin := time.Now()
		err := tc.call(ctx)
		took := time.Since(begin)
		t.Logf("%s: %s: %v", tc.name, took, err)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "statement timeout 200ms") {
			t.Errorf("%s: %v, want the statement timeout", tc.name, err)
		}
		if took < timeout || took > tc.max+2*time.Second {
			t.Errorf("%s returned after %s, want between %s and about %s", tc.name, took, timeout, tc.max)
		}
	}

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err = sdk.Lookup(short, c, Fulfil, run.ID)
	if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "statement timeout") || time.Since(begin) > timeout {
		t.Fatalf("Lookup with an earlier deadline: %v after %s", err, time.Since(begin))
	}
}

// A statement timeout that is not positive is a configuration error,
// returned by NewClient.
func TestStatementTimeout_MustBePositive(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, d := range []time.Duration{0, -time.Second} {
		c, err := sdk.NewClient(pool, sdk.WithStatementTimeout(d))
		if c != nil || err == nil || !strings.Contains(err.Error(), "statement timeout") {
			t.Fatalf("NewClient with statement timeout %s: %v, %v", d, c, err)
		}
	}
}
