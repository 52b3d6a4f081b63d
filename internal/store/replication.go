package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// ReplicationMode is what a failover of the server can cost Tenure's
// commits (docs/guarantees.md, "Replication and failover").
type ReplicationMode string

// Replication modes.
const (
	// ReplicationNone: the server streams to no standby (or none this role
	// can see). A failover needs a standby; a crash of the server alone
	// loses nothing committed.
	ReplicationNone ReplicationMode = "none"
	// ReplicationSynchronous: every commit waits for a standby to have it
	// (synchronous_standby_names is set and synchronous_commit is on,
	// remote_write or remote_apply): a promotion of that standby loses
	// nothing acknowledged.
	ReplicationSynchronous ReplicationMode = "synchronous"
	// ReplicationAsynchronous: the server has standbys, but commits do not
	// wait for them: promoting one loses what it had not received, and
	// at-most-once steps can run twice.
	ReplicationAsynchronous ReplicationMode = "asynchronous"
	// ReplicationStandby: the server is itself a standby, in recovery: it
	// takes no writes.
	ReplicationStandby ReplicationMode = "standby"
)

// Replication is how the server replicates the commits of a session with
// the store's settings.
type Replication struct {
	Mode ReplicationMode
	// Standbys is how many physical standbys stream from the server.
	Standbys int
	// SynchronousStandbyNames and SynchronousCommit are the server's
	// settings, as the session sees them.
	SynchronousStandbyNames, SynchronousCommit string
	// CheckedAt is when it was read, on this process's clock.
	CheckedAt time.Time
}

// Describe says what the mode means for Tenure's commits, in a sentence
// for a log line or a banner.
func (r Replication) Describe() string {
	switch r.Mode {
	case ReplicationAsynchronous:
		return fmt.Sprintf("commits are not synchronously replicated (synchronous_standby_names %q, synchronous_commit %s) "+
			"while the server has %d standbys: a failover to one can lose acknowledged runs and run at-most-once "+
			"steps twice; see docs/operations.md, \"A synchronous standby\"",
			r.SynchronousStandbyNames, r.SynchronousCommit, r.Standbys)
	case ReplicationSynchronous:
		return fmt.Sprintf("commits are synchronously replicated to %d standbys: a failover loses nothing acknowledged", r.Standbys)
	case ReplicationStandby:
		return "the server is a standby in recovery: it takes no writes"
	}
	return "the server streams to no standby"
}

// ReadReplication reads how the server replicates the commits of db's
// session: its physical standbys (pg_stat_replication, less the senders of
// logical replication slots) and its synchronous_standby_names and
// synchronous_commit. Any role can read it: the rows of
// pg_stat_replication are visible to all, their details are not needed.
func (s *Store) ReadReplication(ctx context.Context, db DB) (Replication, error) {
	r := Replication{CheckedAt: time.Now()}
	var recovery bool
	err := s.query(ctx, db, planHot, scanOne(&recovery, &r.SynchronousStandbyNames, &r.SynchronousCommit, &r.Standbys), `
		SELECT pg_catalog.pg_is_in_recovery(),
		       pg_catalog.current_setting('synchronous_standby_names'),
		       pg_catalog.current_setting('synchronous_commit'),
		       (SELECT count(*) FROM pg_catalog.pg_stat_replication w
		        WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_replication_slots l
		                          WHERE l.active_pid = w.pid AND l.slot_type = 'logical'))::int`)
	if err != nil {
		return r, s.wrap("read the server's replication", err)
	}
	switch {
	case recovery:
		r.Mode = ReplicationStandby
	case r.Standbys == 0:
		r.Mode = ReplicationNone
	case r.SynchronousStandbyNames != "" &&
		slices.Contains([]string{"on", "remote_write", "remote_apply"}, r.SynchronousCommit):
		r.Mode = ReplicationSynchronous
	default:
		r.Mode = ReplicationAsynchronous
	}
	return r, nil
}
