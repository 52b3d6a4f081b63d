package runtime

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/record"
)

// ReplicationCheckInterval is how often a worker reads how its commits are
// replicated.
const ReplicationCheckInterval = time.Minute

// ReplicationObserver is an optional interface of an Observer (the otel
// package implements it): it hears how the worker's commits are replicated
// each time the worker reads it.
type ReplicationObserver interface {
	ReplicationChecked(r record.Replication)
}

// Replication returns how the database server replicates the worker's
// commits, as last read. A worker whose server has standbys it does not wait
// for (record.ReplicationAsynchronous) says so once in its log, when it finds out;
// Health reports it too when Config.RequireSynchronousReplication is set.
func (w *Worker) Replication() record.Replication {
	if r := w.replication.Load(); r != nil {
		return *r
	}
	return record.Replication{}
}

// checkReplication reads how the server replicates the worker's commits on
// conn (the heartbeat's), and reports a change.
func (w *Worker) checkReplication(ctx context.Context, conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StatementTimeout)
	defer cancel()
	sr, err := w.store.ReadReplication(ctx, conn)
	if err != nil {
		if ctx.Err() == nil {
			w.cfg.Logger.Debug("tenure: could not read how the database replicates commits", "worker", w.cfg.Label, "error", err)
		}
		return
	}
	r := sr
	old := w.replication.Swap(&r)
	if o, ok := w.cfg.Observer.(ReplicationObserver); ok {
		o.ReplicationChecked(r)
	}
	was := record.ReplicationUnknown
	if old != nil {
		was = old.Mode
	}
	switch {
	case r.Mode == was:
	case r.Mode == record.ReplicationAsynchronous:
		w.cfg.Logger.Warn("tenure: "+r.Description, "worker", w.cfg.Label, "standbys", r.Standbys,
			"synchronous_standby_names", r.SynchronousStandbyNames, "synchronous_commit", r.SynchronousCommit)
	case was == record.ReplicationAsynchronous:
		w.cfg.Logger.Info("tenure: "+r.Description, "worker", w.cfg.Label)
	}
}

// replicationHealth is Health's part for replication: an error only when
// the worker must have synchronous replication and it has not.
func (w *Worker) replicationHealth() error {
	if !w.cfg.RequireSynchronousReplication {
		return nil
	}
	if r := w.Replication(); r.Mode == record.ReplicationAsynchronous || r.Mode == record.ReplicationStandby {
		return &replicationError{r}
	}
	return nil
}

type replicationError struct{ r record.Replication }

func (e *replicationError) Error() string {
	return "replication: " + e.r.Description + " (Config.RequireSynchronousReplication)"
}
