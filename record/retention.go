package record

import "time"

// HistoryRetention is the retention configured (the SQL table
// history_retention): how long after they finished the runs of each kind go,
// with their steps and attempts, when retention drops a day's partitions of
// steps and attempts. A zero age keeps that kind of run for good, as a new
// schema does for all three. A run with failure history (failed, or failed
// before a requeue) goes only by Failed.
type HistoryRetention struct {
	// Completed is the age of a completed run that lets it go; 0 keeps them.
	Completed time.Duration
	// Cancelled is the same for cancelled runs.
	Cancelled time.Duration
	// Failed is the same for runs with failure history, failure rows
	// included; 0 (the default) keeps them for good.
	Failed time.Duration
	// Archive copies each run with failure history that goes, with its
	// failure rows, steps and attempts, to the table history_archive first.
	Archive bool
	// ChangedAt, ChangedBy and Note say when, by which database role and why
	// it was last set (read only).
	ChangedAt time.Time
	ChangedBy string
	Note      string
}

// HistoryDrop is a row of history_drops, retention's ledger: a day's
// partitions of steps and attempts dropped.
type HistoryDrop struct {
	// ID is the ledger row's.
	ID int64
	// Partition is the partitions' suffix: a day (YYYYMMDD), or 0 for the
	// tables as they were before schema 22.
	Partition string
	// State is "detached" until the detached tables are dropped and the
	// runs that went with them deleted, then "done".
	State string
	// Kept counts the runs of the day whose histories moved to the new
	// partitions of the day; Archived those copied to history_archive.
	Kept, Archived int64
	// RunsDeleted and FailuresDeleted count the runs and failure rows that
	// went.
	RunsDeleted, FailuresDeleted int64
	// By is who carried it out (a worker's label, by default the database
	// role); Note is the pass's note.
	By, Note string
	// StartedAt is when the day's partitions were detached, FinishedAt when
	// the drop was done (nil until then).
	StartedAt  time.Time
	FinishedAt *time.Time
}
