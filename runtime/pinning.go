package runtime

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// checkStranded logs, per workflow, queue and build, the runs this worker
// could serve that are pinned (sdk.WithPinning) to a build no live worker
// of theirs runs: they wait until a worker of that build starts, or until
// someone moves them. It runs at start and with the replication check, on
// the heartbeat's connection: one statement a minute, whose cost grows with
// the runs nobody serves, not with those served (store.Stranded).
func (w *Worker) checkStranded(ctx context.Context, conn *pgx.Conn) {
	w.mu.Lock()
	names := w.names
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StatementTimeout)
	defer cancel()
	stranded, err := w.store.Stranded(ctx, conn, names, w.cfg.Queues)
	if err != nil {
		// Warned, not left to debug: while it fails, runs pinned to a
		// build that is gone wait unannounced.
		w.cfg.Logger.Warn("tenure: could not look for runs pinned to builds no live worker runs (tenure workers lists them)",
			"worker", w.cfg.Label, "error", err)
		return
	}
	for _, s := range stranded {
		w.cfg.Logger.Warn("tenure: runs are pinned to a build no live worker runs: they wait until a worker of that build starts, "+
			"or until they are moved to another (tenure runs move --build BUILD --to BUILD --dry-run)",
			"worker", w.cfg.Label, "workflow", s.Workflow, "queue", s.Queue, "build", s.Build, "runs", s.Runs,
			"this_build", w.cfg.BuildID)
	}
}
