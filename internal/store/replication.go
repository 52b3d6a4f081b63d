package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tenurehq/tenure/record"
)

// ReplicationMode is record.ReplicationMode, defined there for applications and operators to read.
type ReplicationMode = record.ReplicationMode

// Replication modes.
const (
	ReplicationNone         = record.ReplicationNone
	ReplicationSynchronous  = record.ReplicationSynchronous
	ReplicationAsynchronous = record.ReplicationAsynchronous
	ReplicationStandby      = record.ReplicationStandby
)

// Replication is record.Replication, defined there for applications and operators to read.
type Replication = record.Replication

// describe says what the mode means for Tenure's commits, in a sentence
// for a log line or a banner (Replication.Description).
func describe(r Replication) string {
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
	r.Description = describe(r)
	return r, nil
}
