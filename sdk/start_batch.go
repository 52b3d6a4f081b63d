package sdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/internal/store"
)

// maxStartBatch bounds how many runs one flush records; the rest wait for
// the next flush.
const maxStartBatch = 1000

// flushLockWait is how long a flush waits for a key held by another open
// transaction before it gives up and lets each of its callers insert alone:
// only the caller whose key is busy then waits for it.
const flushLockWait = time.Second

// errAlone tells a caller that its run was not recorded by the shared flush
// and that it must insert it on its own.
var errAlone = errors.New("insert alone")

// startBatch lets concurrent Start calls of one client share commits, without
// a goroutine of its own: the caller that finds no flush in progress records
// every pending run with one InsertRuns; callers arriving meanwhile queue
// theirs and wait; when a flush returns, one waiting caller (whose run is
// pending) is made the next flusher. An idle client flushes at once.
type startBatch struct {
	mu       sync.Mutex
	pending  []*startRequest // the leader, when there is one, comes first
	flushing bool            // some caller is flushing or has been told to
	flushes  atomic.Int64    // flushes so far, read by tests
	lockWait time.Duration   // flushLockWait, or another in tests; guarded by mu
}

// startRequest is one waiting Start.
type startRequest struct {
	run  store.NewRun
	wake chan struct{} // receives when done or lead is set

	// Guarded by startBatch.mu.
	lead bool // this caller must flush what is pending
	done bool // res and err are set
	res  store.Inserted
	err  error
}

// insert records r, sharing the commit with concurrent calls, and returns
// once it is committed or ctx ends.
func (b *startBatch) insert(ctx context.Context, c *Client, r store.NewRun) (store.Inserted, error) {
	if err := ctx.Err(); err != nil {
		return store.Inserted{}, err // the flush would not stop for it
	}
	req := &startRequest{run: r, wake: make(chan struct{}, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, req)
	req.lead = !b.flushing
	b.flushing = true
	lead := req.lead
	b.mu.Unlock()
	for !lead {
		select {
		case <-req.wake:
		case <-ctx.Done():
			b.mu.Lock()
			defer b.mu.Unlock()
			if req.done && !errors.Is(req.err, errAlone) {
				return req.res, req.err
			}
			i := slices.Index(b.pending, req)
			if i >= 0 {
				b.pending = slices.Delete(b.pending, i, i+1)
			}
			if req.lead {
				b.handOff()
			}
			if i < 0 && !req.done {
				// A flush in progress carries the run: it may yet be
				// recorded.
				return store.Inserted{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
			}
			return store.Inserted{}, ctx.Err() // never sent
		}
		b.mu.Lock()
		done := req.done
		lead = req.lead
		b.mu.Unlock()
		if done {
			return alone(ctx, c, req)
		}
	}
	b.flush(ctx, c)
	return alone(ctx, c, req)
}

// alone returns a request's outcome, inserting its run on the caller's own
// when the shared flush could not.
func alone(ctx context.Context, c *Client, req *startRequest) (store.Inserted, error) {
	if !errors.Is(req.err, errAlone) {
		return req.res, req.err
	}
	out, err := c.insertRetrying(ctx, func(ctx context.Context) ([]store.Inserted, error) {
		return c.store.InsertRuns(ctx, c.store.Pool(), []store.NewRun{req.run})
	})
	if err != nil {
		return store.Inserted{}, err
	}
	return out[0], nil
}

// flush records up to maxStartBatch pending runs (the caller's first), hands
// each its outcome, and passes the lead on. Its tries do not end with the
// flushing caller's context, since the other runs of the batch depend on
// them: each is bounded by the statement timeout instead.
func (b *startBatch) flush(ctx context.Context, c *Client) {
	b.mu.Lock()
	n := min(len(b.pending), maxStartBatch)
	batch := b.pending[:n:n]
	b.pending = slices.Clone(b.pending[n:])
	lockWait := b.lockWait
	b.mu.Unlock()

	b.flushes.Add(1)
	res, errs := insertBatch(context.WithoutCancel(ctx), c, batch, lockWait)

	b.mu.Lock()
	defer b.mu.Unlock()
	for i, req := range batch {
		req.res, req.err, req.done, req.lead = res[i], errs[i], true, false
		signal(req.wake)
	}
	b.handOff()
}

// handOff makes the first pending caller the next flusher, or records that
// no flush is in progress. b.mu must be held.
func (b *startBatch) handOff() {
	if len(b.pending) == 0 {
		b.flushing = false
		return
	}
	next := b.pending[0]
	next.lead = true
	signal(next.wake)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// insertBatch inserts the runs of batch and returns each one's outcome. A try
// whose outcome was not seen (a lost connection, a timeout) is sent again
// (see insertRetrying); when none settles it, every run's error wraps
// ErrOutcomeUnknown. When the database refused the batch for a row's
// content, or a key stayed busy for lockWait, it rolled the whole batch back,
// and each caller is told to insert its run alone (errAlone): one caller's
// bad row or busy key fails or stalls only that caller.
func insertBatch(ctx context.Context, c *Client, batch []*startRequest, lockWait time.Duration) ([]store.Inserted, []error) {
	runs := make([]store.NewRun, len(batch))
	for i, req := range batch {
		runs[i] = req.run
	}
	res := make([]store.Inserted, len(batch))
	errs := make([]error, len(batch))
	out, err := c.insertRetrying(ctx, func(ctx context.Context) ([]store.Inserted, error) {
		return c.store.InsertRunsBounded(ctx, runs, lockWait)
	})
	if err == nil {
		return out, errs
	}
	if errors.Is(err, store.ErrKeyBusy) || (len(batch) > 1 && refusedRow(err)) {
		err = errAlone
	}
	for i := range errs {
		errs[i] = err
	}
	return res, errs
}

// refusedRow reports whether err is the database refusing a row's content:
// a data exception (such as a JSON string jsonb cannot hold), an integrity
// violation or a size limit.
func refusedRow(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23") || strings.HasPrefix(pgErr.Code, "54")
}
