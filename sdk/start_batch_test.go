package sdk_test

import (
	"context"
	"errors"
	"fmt"
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

// newClient returns a client on a freshly migrated schema of its own, closed
// at cleanup.
func newClient(t *testing.T, opts ...sdk.ClientOption) (*sdk.Client, *pgxpool.Pool, string) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.NewClient(pool, append([]sdk.ClientOption{sdk.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, pool, schema
}

func countRuns(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{schema}.Sanitize()+".runs").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// xid returns the next transaction ID to be assigned: its growth counts the
// write transactions of the whole server.
func xid(t *testing.T, pool *pgxpool.Pool) uint64 {
	t.Helper()
	var x uint64
	if err := pool.QueryRow(t.Context(), "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").Scan(&x); err != nil {
		t.Fatal(err)
	}
	return x
}

// Concurrent Starts share commits: 100 of them make 100 runs in far fewer
// than 100 write transactions, and each returns its own committed run.
func TestStart_ConcurrentCallsShareCommits(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	if _, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "warm-up"}); err != nil {
		t.Fatal(err)
	}
	flushes, before := sdk.Flushes(c), xid(t, pool)
	var wg sync.WaitGroup
	runs := make([]*sdk.Run[string], 100)
	errs := make([]error, 100)
	for i := range runs {
		wg.Go(func() {
			runs[i], errs[i] = sdk.Start(ctx, c, Fulfil, OrderIn{ID: fmt.Sprint(i)})
			if errs[i] == nil {
				// The run exists once Start returns.
				_, errs[i] = sdk.Lookup(ctx, c, Fulfil, runs[i].ID)
			}
		})
	}
	wg.Wait()
	batches, xids := sdk.Flushes(c)-flushes, xid(t, pool)-before
	seen := map[uuid.UUID]bool{}
	for i, r := range runs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !r.Created || seen[r.ID] {
			t.Fatalf("run %d: %s created %v, seen before %v", i, r.ID, r.Created, seen[r.ID])
		}
		seen[r.ID] = true
	}
	if n := countRuns(t, pool, schema); n != 101 {
		t.Fatalf("%d runs, want 101", n)
	}
	t.Logf("100 concurrent Starts: %d flushes, %d transaction IDs used on the server", batches, xids)
	if batches > 30 {
		t.Fatalf("100 concurrent Starts took %d flushes, want far fewer than 100", batches)
	}
}

// Many goroutines starting one key get one run, created by exactly one.
func TestStart_ConcurrentSameKeyMakesOneRun(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	var wg sync.WaitGroup
	runs := make([]*sdk.Run[string], 50)
	errs := make([]error, 50)
	for i := range runs {
		wg.Go(func() {
			runs[i], errs[i] = sdk.Start(ctx, c, Fulfil, OrderIn{ID: "same"}, sdk.WithKey("order-same"))
		})
	}
	wg.Wait()
	created := 0
	for i, r := range runs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if r.ID != runs[0].ID {
			t.Fatalf("start %d got run %s, start 0 got %s", i, r.ID, runs[0].ID)
		}
		if r.Created {
			created++
		}
	}
	if created != 1 || countRuns(t, pool, schema) != 1 {
		t.Fatalf("%d starts created, %d runs: want 1 and 1", created, countRuns(t, pool, schema))
	}
}

// blockFlush holds the key "blocker" in an open transaction, so that a Start
// with that key (the leader) waits in its flush until release is called.
func blockFlush(t *testing.T, c *sdk.Client, pool *pgxpool.Pool, schema string) (leader chan error, release func()) {
	t.Helper()
	sdk.SetFlushLockWait(c, time.Minute) // the blocked flush holds the lead
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.StartTx(ctx, c, tx, Fulfil, OrderIn{ID: "blocker"}, sdk.WithKey("blocker")); err != nil {
		t.Fatal(err)
	}
	leader = make(chan error, 1)
	go func() {
		// The same input: the leader gets the blocker's run once it commits.
		_, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "blocker"}, sdk.WithKey("blocker"))
		leader <- err
	}()
	waitPending(t, c, 0) // the leader took its own run: it is flushing
	for deadline := time.Now().Add(10 * time.Second); ; {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE '%INSERT INTO%' || $1 || '%runs%')`, schema).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader's insert never waited for the blocker")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return leader, func() { _ = tx.Commit(ctx) }
}

func waitPending(t *testing.T, c *sdk.Client, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); sdk.Pending(c) != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d Starts pending, want %d", sdk.Pending(c), n)
		}
	}
}

// A Start whose ctx ends while it waits for a flush returns ctx's error, and
// the others go on: the next flush records theirs.
func TestStart_CallerLeavingWhileWaitingFailsOnlyItself(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	leader, release := blockFlush(t, c, pool, schema)

	short, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := sdk.Start(short, c, Fulfil, OrderIn{ID: "leaves"})
		left <- err
	}()
	waitPending(t, c, 1) // next in line: it has the lead once the flush returns
	stays := make(chan error, 1)
	go func() {
		_, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "stays"})
		stays <- err
	}()
	waitPending(t, c, 2)
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("leaving Start: %v, want context.Canceled", err)
	}
	release()
	if err := <-leader; err != nil {
		t.Fatalf("leader: %v", err)
	}
	if err := <-stays; err != nil {
		t.Fatalf("staying Start: %v", err)
	}
	// blocker (committed by StartTx) and the staying run; the leaving one
	// was still pending, so it was never sent.
	if n := countRuns(t, pool, schema); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
}

// One Start's input that the database refuses fails only that Start, though
// it was flushed in one batch with others.
func TestStart_RefusedRowFailsOnlyItsCaller(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	leader, release := blockFlush(t, c, pool, schema)
	errs := make(chan error, 5)
	bad := make(chan error, 1)
	for i := range 5 {
		go func() {
			_, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: fmt.Sprint(i)})
			errs <- err
		}()
	}
	go func() {
		// Valid JSON, but jsonb cannot hold a NUL character.
		_, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "nul\x00"})
		bad <- err
	}()
	waitPending(t, c, 6)
	flushes := sdk.Flushes(c)
	release()
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatalf("a good Start failed: %v", err)
		}
	}
	if err := <-bad; err == nil {
		t.Fatal("the NUL input was accepted")
	}
	if n := sdk.Flushes(c) - flushes; n != 1 {
		t.Fatalf("%d flushes after the leader's, want the 6 waiting Starts in one", n)
	}
	if n := countRuns(t, pool, schema); n != 6 {
		t.Fatalf("%d runs, want blocker and the 5 good ones", n)
	}
}

// A Start whose key is held by an open transaction waits for it, but the
// Starts flushed with it give up on the shared flush after the lock wait and
// are recorded without it.
func TestStart_BusyKeyStallsOnlyItsCaller(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	held, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Rollback(ctx) }()
	first, err := sdk.StartTx(ctx, c, held, Fulfil, OrderIn{ID: "held"}, sdk.WithKey("held"))
	if err != nil {
		t.Fatal(err)
	}

	leader, release := blockFlush(t, c, pool, schema) // so that the next flush takes all of the Starts below
	sdk.SetFlushLockWait(c, 100*time.Millisecond)
	busy := make(chan *sdk.Run[string], 1)
	go func() {
		run, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "held"}, sdk.WithKey("held")) // the same input: it gets the held run
		if err != nil {
			t.Error(err)
		}
		busy <- run
	}()
	waitPending(t, c, 1)
	others := make(chan error, 5)
	for i := range 5 {
		go func() {
			_, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: fmt.Sprint(i)})
			others <- err
		}()
	}
	waitPending(t, c, 6)
	release()
	if err := <-leader; err != nil {
		t.Fatalf("leader: %v", err)
	}
	for range 5 {
		select {
		case err := <-others:
			if err != nil {
				t.Fatalf("another Start: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the other Starts waited for the busy key")
		}
	}
	select {
	case <-busy:
		t.Fatal("the Start of the busy key returned while its key was held")
	default:
	}
	if err := held.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if run := <-busy; run == nil || run.ID != first.ID || run.Created {
		t.Fatalf("Start of the busy key: %+v, want run %s, not created", run, first.ID)
	}
	if n := countRuns(t, pool, schema); n != 7 {
		t.Fatalf("%d runs, want held, blocker and the 5 others", n)
	}
}

// Starts leaving at random moments never lose the lead: every Start returns,
// each one that succeeded has its run, and the client starts runs after.
func TestStart_LeavingCallersNeverStallTheOthers(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	already, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := sdk.Start(already, c, Fulfil, OrderIn{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with an ended ctx: %v", err)
	}
	var wg sync.WaitGroup
	runs := make([]*sdk.Run[string], 200)
	for i := range runs {
		wg.Go(func() {
			sctx := ctx
			if i%2 == 1 {
				var cancel context.CancelFunc
				sctx, cancel = context.WithTimeout(ctx, time.Duration(i%7)*time.Millisecond)
				defer cancel()
			}
			run, err := sdk.Start(sctx, c, Fulfil, OrderIn{ID: fmt.Sprint(i)})
			if err != nil && (i%2 == 0 || !errors.Is(err, context.DeadlineExceeded)) {
				t.Errorf("start %d: %v", i, err)
			}
			runs[i] = run
		})
	}
	wg.Wait()
	for _, r := range runs {
		if r != nil {
			if _, err := sdk.Lookup(ctx, c, Fulfil, r.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "after"}); err != nil {
		t.Fatal(err)
	}
	if sdk.Pending(c) != 0 {
		t.Fatalf("%d Starts still pending", sdk.Pending(c))
	}
	t.Logf("%d runs from %d Starts, %d flushes", countRuns(t, pool, schema), len(runs)+1, sdk.Flushes(c))
}
