package runtime

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/store"
)

// leaseKeeper renews the leases of the runs the worker holds, in one
// statement per heartbeat that keeps the registry row too, and stops the
// runs whose lease is gone, or whose lease it could not renew in time.
type leaseKeeper struct {
	cfg      *Config
	store    *store.Store
	pool     *runPool
	registry *registry
	connect  func(context.Context) (*pgx.Conn, error) // Worker.connect
	// checkReplication reads the server's replication on the heartbeat's
	// connection (Worker.checkReplication).
	checkReplication func(context.Context, *pgx.Conn)
	// checkStranded looks for runs pinned to builds nobody runs on the
	// heartbeat's connection, as often (Worker.checkStranded).
	checkStranded func(context.Context, *pgx.Conn)
	// renewals is the renewals' path to the database, retried with backoff
	// while it fails: Health reports it.
	renewals  *trouble
	abandoned atomic.Bool // Shutdown gave up: leases are no longer renewed
	loop      loop        // run's goroutine, between start and stop
}

// start renews the leases on conn in a goroutine of its own (run) until
// stop, or until ctx ends; conn is closed when it stops.
func (k *leaseKeeper) start(ctx context.Context, conn *pgx.Conn) {
	k.loop = startLoop(ctx, func(ctx context.Context) { k.run(ctx, conn) })
}

// stop ends the renewals and waits for the last one: call it once the run
// pool has stopped, so that every run keeps its lease until it ends.
func (k *leaseKeeper) stop() { k.loop.stop() }

// run renews every held lease once per interval on conn, until ctx ends. It
// uses a connection of its own: activities holding every pooled connection
// (transactional ones do, for their whole call) must not starve it. A
// renewal that fails is tried again with backoff, sooner than the next beat;
// each try gives up in time to stop, before its lease can expire, a run it
// could not renew.
func (k *leaseKeeper) run(ctx context.Context, conn *pgx.Conn) {
	timer := time.NewTimer(k.cfg.HeartbeatInterval)
	defer timer.Stop()
	defer func() {
		if conn != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
	}()
	bo := newBackoff(min(100*time.Millisecond, k.cfg.HeartbeatInterval), k.cfg.HeartbeatInterval)
	checked := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		next := k.cfg.HeartbeatInterval
		if err := k.beat(ctx, &conn); err != nil {
			next = bo.delay()
		} else {
			bo.reset()
			if conn != nil && time.Since(checked) >= ReplicationCheckInterval {
				checked = time.Now()
				k.checkReplication(ctx, conn)
				k.checkStranded(ctx, conn)
			}
		}
		// A lease not renewed (the renewal failed, or its row was busy)
		// must be stopped as its time runs out, not at the next beat.
		timer.Reset(max(min(next, k.leaseLeft()), 10*time.Millisecond))
	}
}

// leaseLeft is the least time any held lease can still be ours.
func (k *leaseKeeper) leaseLeft() time.Duration {
	least := k.cfg.LeaseTTL
	k.pool.each(func(e *execution) {
		if !e.lost.Load() { // a lost run may linger (its activity ignoring its context)
			least = min(least, e.leaseLeft())
		}
	})
	return least
}

// beat renews every held lease once.
func (k *leaseKeeper) beat(ctx context.Context, conn **pgx.Conn) error {
	held := k.pool.held()
	if k.abandoned.Load() {
		// Shutdown gave up on these runs: their leases run out, which ends
		// their writes' retries, and they are rescued elsewhere.
		for _, e := range held {
			if e.leaseLeft() <= 0 {
				e.lose("not renewed after Shutdown gave up handing the run back")
			}
		}
		return nil
	}
	held, leases, timeout := k.live(held)
	began := time.Now()
	var renewed map[store.Lease]store.LeaseState
	tctx, cancel := context.WithTimeout(ctx, timeout)
	var err error
	if *conn == nil {
		*conn, err = k.connect(tctx)
	}
	if err == nil && len(held) == 0 {
		err = k.beatRow(ctx, tctx, conn)
		cancel()
		if err != nil && ctx.Err() == nil {
			k.renewals.failed(err, "leases", 0)
			return err
		}
		if err == nil {
			k.renewals.ok()
		}
		return nil
	}
	if err == nil {
		renewed, err = k.renew(ctx, tctx, conn, leases)
	}
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		k.renewals.failed(err, "leases", len(leases))
		// Without a renewal the lease may expire: stop what can no
		// longer be ours. Durations on our own clock, never compared
		// with the database's.
		for _, e := range held {
			if e.leaseLeft() <= 0 {
				e.lose("lease not renewed within its TTL")
			}
		}
		return err
	}
	k.renewals.ok()
	k.settle(held, renewed, began)
	return nil
}

// live stops the held runs whose lease can no longer be ours (past its TTL,
// by our own clock), and returns the others, their leases, and how long the
// renewal may take: it ends before the first of these leases can expire, so
// that its run is stopped in time if the renewal fails.
func (k *leaseKeeper) live(held []*execution) ([]*execution, []store.Lease, time.Duration) {
	timeout := k.cfg.StatementTimeout
	leases := make([]store.Lease, 0, len(held))
	live := held[:0]
	for _, e := range held {
		left := e.leaseLeft()
		if left <= 0 && !e.ending.Load() {
			e.lose("lease not renewed within its TTL")
			continue
		}
		live = append(live, e)
		leases = append(leases, e.lease)
		timeout = min(timeout, max(left, 10*time.Millisecond))
	}
	return live, leases, timeout
}

// beatRow keeps the registry row alone, when there is no lease to renew.
func (k *leaseKeeper) beatRow(ctx, tctx context.Context, conn **pgx.Conn) error {
	var err error
	if row := k.registry.row(0, false); row != nil {
		if err = k.store.Beat(tctx, *conn, *row); registryRefused(err) {
			k.registry.failed(err) // the server refused the row: no outage
			err = nil
		}
	}
	if err != nil {
		_ = (*conn).Close(context.WithoutCancel(ctx))
		*conn = nil
	}
	return err
}

// renew renews leases, and the registry row with them, in one statement.
func (k *leaseKeeper) renew(ctx, tctx context.Context, conn **pgx.Conn, leases []store.Lease) (map[store.Lease]store.LeaseState, error) {
	row := k.registry.row(len(leases), false)
	renewed, err := k.store.Renew(tctx, *conn, leases, k.cfg.LeaseTTL, row)
	if row != nil && registryRefused(err) {
		// The server refused the statement: the registry's part may be
		// the cause, and leases never wait for it.
		k.registry.failed(err)
		renewed, err = k.store.Renew(tctx, *conn, leases, k.cfg.LeaseTTL, nil)
	}
	if err != nil { // the connection may be broken: open a fresh one next time
		_ = (*conn).Close(context.WithoutCancel(ctx))
		*conn = nil
	}
	return renewed, err
}

// settle acts on a renewal sent at began: what it renewed is ours for
// another TTL, what it did not is stopped, unless its last write is on the
// way or its row was only busy.
func (k *leaseKeeper) settle(held []*execution, renewed map[store.Lease]store.LeaseState, began time.Time) {
	for _, e := range held {
		st, ours := renewed[e.lease]
		switch {
		case st.Renewed:
			e.renewed(began)
			if st.CancelRequested {
				e.requestCancel()
			}
		case e.ending.Load():
			// Our own last write may have ended the lease; its
			// fenced result says whether the lease was lost.
		case ours:
			// Still ours, but its row was locked by a write in flight:
			// the next beat renews it, unless the TTL ran out meanwhile.
			if e.leaseLeft() <= 0 {
				e.lose("lease not renewed within its TTL")
			}
		default:
			e.lose("heartbeat found the lease taken, expired by the database clock, or the run cancelled")
		}
	}
}
