package record

import "time"

// ReplicationMode is what a failover of the database server can cost
// Tenure's commits (docs/guarantees.md, "Replication and failover").
type ReplicationMode string

// Replication modes.
const (
	// ReplicationUnknown: not read yet (a worker's before its first read),
	// or the server could not say.
	ReplicationUnknown ReplicationMode = ""
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
	// wait for them: promoting one loses what it had not received, and an
	// at-most-once step whose attempt's record is lost can run again.
	ReplicationAsynchronous ReplicationMode = "asynchronous"
	// ReplicationStandby: the server is itself a standby, in recovery: it
	// takes no writes.
	ReplicationStandby ReplicationMode = "standby"
)

// Replication is how the database server replicates the commits of a
// session, as a worker (runtime's Worker.Replication) or an operator
// (operator's Replication) last read it.
type Replication struct {
	// Mode is what a failover can cost the commits.
	Mode ReplicationMode `json:"mode"`
	// Standbys is how many physical standbys stream from the server.
	Standbys int `json:"standbys"`
	// SynchronousStandbyNames and SynchronousCommit are the server's
	// settings, as the session sees them.
	SynchronousStandbyNames string `json:"synchronous_standby_names"`
	SynchronousCommit       string `json:"synchronous_commit"`
	// CheckedAt is when it was read, on the reading process's clock (zero
	// before the first read).
	CheckedAt time.Time `json:"checked_at"`
	// Description says what the mode means for Tenure's commits, in a
	// sentence for a log line or a banner.
	Description string `json:"description"`
}
