package sdk

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/store"
)

// maxStartBatch bounds how many runs one flush records; the rest wait for
// the next flush.
const maxStartBatch = 1000

// flushTimeout bounds one flush. It does not end with the flushing caller's
// context: the other runs of the batch depend on it.
const flushTimeout = 30 * time.Second

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
func (b *startBatch) insert(ctx context.Context, st *store.Store, r store.NewRun) (store.Inserted, error) {
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
			if req.done {
				return req.res, req.err
			}
			if i := slices.Index(b.pending, req); i >= 0 {
				b.pending = slices.Delete(b.pending, i, i+1)
			}
			if req.lead {
				b.handOff()
			}
			return store.Inserted{}, ctx.Err()
		}
		b.mu.Lock()
		done := req.done
		lead = req.lead
		b.mu.Unlock()
		if done {
			return req.res, req.err
		}
	}
	b.flush(ctx, st)
	return req.res, req.err
}

// flush records up to maxStartBatch pending runs (the caller's first), hands
// each its outcome, and passes the lead on.
func (b *startBatch) flush(ctx context.Context, st *store.Store) {
	b.mu.Lock()
	n := min(len(b.pending), maxStartBatch)
	batch := b.pending[:n:n]
	b.pending = slices.Clone(b.pending[n:])
	b.mu.Unlock()

	b.flushes.Add(1)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	res, errs := record(fctx, st, batch)
	cancel()

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

// record inserts the runs of batch and returns each one's outcome. When the
// database refuses the batch for a row's content, it rolled the whole batch
// back, so each run is recorded alone: one caller's bad row fails only that
// caller. Any other error (a lost connection, a timeout) leaves every run's
// outcome unknown and is every run's error.
func record(ctx context.Context, st *store.Store, batch []*startRequest) ([]store.Inserted, []error) {
	runs := make([]store.NewRun, len(batch))
	for i, req := range batch {
		runs[i] = req.run
	}
	res := make([]store.Inserted, len(batch))
	errs := make([]error, len(batch))
	out, err := st.InsertRuns(ctx, st.Pool(), runs)
	if err == nil {
		return out, errs
	}
	if len(batch) == 1 || !refusedRow(err) {
		for i := range errs {
			errs[i] = err
		}
		return res, errs
	}
	for i := range runs {
		if out, err := st.InsertRuns(ctx, st.Pool(), runs[i:i+1]); err != nil {
			errs[i] = err
		} else {
			res[i] = out[0]
		}
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
