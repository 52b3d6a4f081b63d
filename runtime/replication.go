package runtime

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicationMode is what a failover of the database server can cost the
// worker's commits (docs/guarantees.md, "Replication and failover").
type ReplicationMode string

// Replication modes, as Worker.Replication reports them.
const (
	// ReplicationUnknown: not read yet, or the server could not say.
	ReplicationUnknown ReplicationMode = ""
	// ReplicationNone: the server streams to no standby. A crash of the
	// server alone loses nothing committed.
	ReplicationNone ReplicationMode = "none"
	// ReplicationSynchronous: every commit waits for a standby to have it:
	// promoting that standby loses nothing acknowledged.
	ReplicationSynchronous ReplicationMode = "synchronous"
	// ReplicationAsynchronous: the server has standbys but commits do not
	// wait for them: promoting one loses what it had not received, and an
	// at-most-once step whose attempt's record is lost can run again.
	ReplicationAsynchronous ReplicationMode = "asynchronous"
	// ReplicationStandby: the server the worker reached is a standby in
	// recovery, which takes no writes.
	ReplicationStandby ReplicationMode = "standby"
)

// Replication is how the database server replicates the worker's commits,
// as the worker last read it: at start and every ReplicationCheckInterval.
type Replication struct {
	Mode ReplicationMode
	// Standbys is how many physical standbys stream from the server.
	Standbys int
	// SynchronousStandbyNames and SynchronousCommit are the server's
	// settings as the worker's sessions see them.
	SynchronousStandbyNames, SynchronousCommit string
	// CheckedAt is when it was read (zero before the first read).
	CheckedAt time.Time
	// Description says what the mode means, in a sentence.
	Description string
}

// ReplicationCheckInterval is how often a worker reads how its commits are
// replicated.
const ReplicationCheckInterval = time.Minute

// ReplicationObserver is an optional interface of an Observer (the otel
// package implements it): it hears how the worker's commits are replicated
// each time the worker reads it.
type ReplicationObserver interface {
	ReplicationChecked(r Replication)
}

// Replication returns how the database server replicates the worker's
// commits, as last read. A worker whose server has standbys it does not wait
// for (ReplicationAsynchronous) says so once in its log, when it finds out;
// Health reports it too when Config.RequireSynchronousReplication is set.
func (w *Worker) Replication() Replication {
	if r := w.replication.Load(); r != nil {
		return *r
	}
	return Replication{}
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
	r := Replication{
		Mode: ReplicationMode(sr.Mode), Standbys: sr.Standbys, SynchronousStandbyNames: sr.SynchronousStandbyNames,
		SynchronousCommit: sr.SynchronousCommit, CheckedAt: sr.CheckedAt, Description: sr.Describe(),
	}
	old := w.replication.Swap(&r)
	if o, ok := w.cfg.Observer.(ReplicationObserver); ok {
		o.ReplicationChecked(r)
	}
	was := ReplicationUnknown
	if old != nil {
		was = old.Mode
	}
	switch {
	case r.Mode == was:
	case r.Mode == ReplicationAsynchronous:
		w.cfg.Logger.Warn("tenure: "+r.Description, "worker", w.cfg.Label, "standbys", r.Standbys,
			"synchronous_standby_names", r.SynchronousStandbyNames, "synchronous_commit", r.SynchronousCommit)
	case was == ReplicationAsynchronous:
		w.cfg.Logger.Info("tenure: "+r.Description, "worker", w.cfg.Label)
	}
}

// replicationHealth is Health's part for replication: an error only when
// the worker must have synchronous replication and it has not.
func (w *Worker) replicationHealth() error {
	if !w.cfg.RequireSynchronousReplication {
		return nil
	}
	if r := w.Replication(); r.Mode == ReplicationAsynchronous || r.Mode == ReplicationStandby {
		return &replicationError{r}
	}
	return nil
}

type replicationError struct{ r Replication }

func (e *replicationError) Error() string {
	return "replication: " + e.r.Description + " (Config.RequireSynchronousReplication)"
}
