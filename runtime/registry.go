package runtime

import (
	"context"
	"os"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/sdk"
)

// registry is the worker's row in the workers table (store.WorkerBeat): the
// lease keeper's beats keep it, start writes the first and stop the last.
// The registry is for people: a worker that cannot write it (a role without
// the grant) runs without it, and says so once.
type registry struct {
	cfg   *Config
	store *store.Store
	id    uuid.UUID // the worker process's ID in the registry
	names []string  // the registered workflows, sorted, once started
	// off is set when the worker cannot write its registry row.
	off atomic.Bool
}

// start writes the worker's first registry row, for the workflows names, and
// removes the rows of workers gone for a week.
func (r *registry) start(ctx context.Context, conn *pgx.Conn, names []string) {
	r.names = names
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	if err := r.store.Beat(ctx, conn, *r.row(0, false)); err != nil {
		r.failed(err)
		return
	}
	if err := r.store.PruneWorkers(ctx, conn); err != nil {
		r.cfg.Logger.Warn("tenure: could not prune the worker registry", "worker", r.cfg.Label, "error", err)
	}
}

// stop writes the registry's last word: stopped, not dead.
func (r *registry) stop(ctx context.Context) {
	row := r.row(0, true)
	if row == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StatementTimeout)
	if err := r.store.Beat(sctx, r.store.Pool(), *row); err != nil {
		r.cfg.Logger.Warn("tenure: could not mark the worker stopped in the registry; it will read as dead after three heartbeats",
			"worker", r.cfg.Label, "error", err)
	}
	cancel()
}

// registryRefused reports whether the server refused the registry's row
// itself: a privilege, a missing table or column, a constraint or bad data
// (SQLSTATE classes 42, 23 and 22). A statement timeout or an admin
// shutdown is an outage of the whole statement, not a reason to run
// without the registry for the worker's life.
func registryRefused(err error) bool {
	class := sqlState(err)
	if len(class) < 2 {
		return false
	}
	class = class[:2]
	return class == "42" || class == "23" || class == "22"
}

// failed turns the registry off for this worker after a write of its row
// failed: its leases must never depend on it.
func (r *registry) failed(err error) {
	if r.off.CompareAndSwap(false, true) {
		r.cfg.Logger.Warn("tenure: the worker cannot write its row in the worker registry and runs without it: "+
			"tenure workers will not list it, and its workflows' runs may be reported as served by no live worker "+
			"(grant the worker's role INSERT, UPDATE, DELETE on the workers table: docs/operations.md, Database roles)",
			"worker", r.cfg.Label, "error", err)
	}
}

// row is the worker's row in the registry, holding held runs, nil once the
// registry is off for this worker.
func (r *registry) row(held int, stopped bool) *store.WorkerBeat {
	if r.off.Load() {
		return nil
	}
	return &store.WorkerBeat{
		ID: r.id, Label: r.cfg.Label, Host: hostname, PID: os.Getpid(), Version: sdk.Version,
		Workflows: r.names, Queues: r.cfg.Queues, Concurrency: r.cfg.Concurrency, Held: held,
		Interval: r.cfg.HeartbeatInterval, TTL: r.cfg.LeaseTTL, Stopped: stopped, Build: r.cfg.BuildID,
	}
}

// hostname is the machine's name, for the registry.
var hostname = func() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}()
