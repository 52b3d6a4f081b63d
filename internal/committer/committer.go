// Package committer is a worker's group commit: the fenced writes of all the
// runs a worker holds go through one goroutine, which writes everything
// pending in one transaction (store.Commit) and answers each run with its
// own outcome.
//
// Batching is natural: a flush starts as soon as the previous one returned,
// with whatever arrived meanwhile. An idle worker's write is flushed at once
// (no timer, no added latency); a busy worker shares each commit among every
// run that reached a write during the previous one. A run waits for its own
// write's commit before it goes on, so nothing is acknowledged early, and a
// run whose fence failed never fails another run's write.
package committer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/internal/store"
)

// ErrStopped is returned for writes made after Stop.
var ErrStopped = errors.New("committer stopped")

// Config configures a Committer.
type Config struct {
	// Store runs the statements.
	Store *store.Store
	// Connect opens the committer's own connection: a pool busy with
	// activities (transactional ones hold a connection for their whole
	// call) must not hold up every run's writes.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Timeout bounds one flush, connecting included.
	Timeout time.Duration
}

// Committer batches runs' writes into shared commits. Create it with New,
// then Start it; Stop it after the last write.
type Committer struct {
	cfg Config

	mu      sync.Mutex
	pending []*request
	stopped bool

	kick chan struct{}
	quit chan struct{}
	done chan struct{}

	commits, writes atomic.Int64
	lastUsed        time.Time // the last commit; touched by the loop goroutine only
}

// idleCheck is how long the connection may sit unused before a flush checks
// that it is still alive (pgxpool checks its idle connections the same way).
const idleCheck = time.Second

type request struct {
	ctx  context.Context
	w    store.Write
	res  store.WriteResult
	err  error
	done chan struct{}
}

// New returns a committer; it writes nothing until Start.
func New(cfg Config) *Committer {
	return &Committer{
		cfg:  cfg,
		kick: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
}

// Start runs the committer's goroutine until Stop.
func (c *Committer) Start() { go c.loop() }

// Stop ends the goroutine once it has flushed what is pending, closes its
// connection, and returns when it is gone. Writes after Stop return
// ErrStopped.
func (c *Committer) Stop() {
	c.mu.Lock()
	already := c.stopped
	c.stopped = true
	c.mu.Unlock()
	if !already {
		close(c.quit)
	}
	<-c.done
}

// Commits returns how many transactions the committer wrote, and Writes how
// many runs' writes they carried.
func (c *Committer) Commits() int64 { return c.commits.Load() }

// Writes returns how many runs' writes the committer committed or refused.
func (c *Committer) Writes() int64 { return c.writes.Load() }

// Write queues w, and returns its outcome once the transaction that carries
// it has committed (or failed). The result's Err is store.ErrLeaseLost when
// w's fence refused it; the error is the batch's database error, after which
// w may or may not be committed (a connection lost during COMMIT): the
// writer may send it again, since every write is idempotent. When ctx ends
// first, Write returns ctx's error and w may still be committed; a write
// whose ctx ended before its flush began is dropped.
func (c *Committer) Write(ctx context.Context, w store.Write) (store.WriteResult, error) {
	r := &request{ctx: ctx, w: w, done: make(chan struct{})}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return store.WriteResult{}, ErrStopped
	}
	c.pending = append(c.pending, r)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	select {
	case <-r.done:
		return r.res, r.err
	case <-ctx.Done():
		return store.WriteResult{}, ctx.Err()
	}
}

func (c *Committer) loop() {
	defer close(c.done)
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	for {
		select {
		case <-c.kick:
		case <-c.quit:
			// Flush what is left, then refuse the rest.
			for c.flushPending(&conn) {
			}
			return
		}
		for c.flushPending(&conn) {
		}
	}
}

// flushPending writes everything pending in one commit; it reports whether
// there was anything.
func (c *Committer) flushPending(conn **pgx.Conn) bool {
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	if len(batch) == 0 {
		return false
	}
	// A writer that stopped waiting (its ctx ended) will not read the
	// outcome, and may already be sending the write again.
	live := batch[:0]
	for _, r := range batch {
		if r.ctx.Err() != nil {
			r.err = r.ctx.Err()
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) > 0 {
		c.flush(conn, live)
	}
	return true
}

func (c *Committer) flush(conn **pgx.Conn, batch []*request) {
	res, err := c.commit(conn, batch)
	var pgErr *pgconn.PgError
	if err != nil && len(batch) > 1 && *conn != nil && errors.As(err, &pgErr) && !store.ServerGone(err) {
		// A statement failed, so the whole transaction rolled back and
		// nothing of it was written: one run's bad data (say, JSON that
		// PostgreSQL refuses) must not fail the others, so each write is
		// tried on its own.
		for _, r := range batch {
			c.flush(conn, []*request{r})
		}
		return
	}
	for i, r := range batch {
		if err != nil {
			r.err = err
		} else {
			r.res = res[i]
		}
		close(r.done)
	}
}

func (c *Committer) commit(conn **pgx.Conn, batch []*request) ([]store.WriteResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	if *conn != nil && time.Since(c.lastUsed) > idleCheck {
		// An idle connection may have been dropped (a restart, a pooler,
		// a firewall) without our knowing: find out before it carries a
		// batch whose outcome a dead connection would leave unknown.
		if err := (*conn).Ping(ctx); err != nil {
			_ = (*conn).Close(context.Background())
			*conn = nil
		}
	}
	if *conn == nil {
		cn, err := c.cfg.Connect(ctx)
		if err != nil {
			return nil, fmt.Errorf("committer: connect: %w", err)
		}
		*conn = cn
	}
	writes := make([]store.Write, len(batch))
	for i, r := range batch {
		writes[i] = r.w
	}
	res, err := c.cfg.Store.Commit(ctx, *conn, writes)
	if err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (*conn).IsClosed() || store.ServerGone(err) {
			// The connection may be broken, or its server no longer takes
			// writes (a standby, read-only, shutting down): the next
			// flush opens a new one, which a multi-host connection string
			// takes to the server that does.
			// The writers retry and log (the worker's trouble log), so an
			// outage is not logged once per flush here.
			_ = (*conn).Close(context.Background())
			*conn = nil
		}
		return nil, err
	}
	c.lastUsed = time.Now()
	c.commits.Add(1)
	c.writes.Add(int64(len(batch)))
	return res, nil
}
