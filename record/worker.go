package record

import (
	"time"

	"github.com/google/uuid"
)

// Worker is a worker's row in the registry: what it is, what it serves, the
// runs it holds and its last heartbeat.
type Worker struct {
	// ID is the worker's ID, new at each start.
	ID uuid.UUID `json:"id"`
	// Label is the worker's label (runtime.Config.Label): the claimant of
	// the runs it holds.
	Label string `json:"label"`
	// Host and PID are the machine and process it runs in.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Version is the Tenure version it runs.
	Version string `json:"version"`
	// Workflows and Queues are the workflows it registered and the queues
	// it serves.
	Workflows []string `json:"workflows"`
	Queues    []string `json:"queues"`
	// Concurrency is how many runs it holds at most.
	Concurrency int `json:"concurrency"`
	// RunsHeld is how many runs it held at its last heartbeat.
	RunsHeld int `json:"runs_held"`
	// StartedAt is when it registered.
	StartedAt time.Time `json:"started_at"`
	// LastHeartbeatAt is its last heartbeat, in the statement that renews
	// its leases.
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
	// StoppedAt is when it stopped gracefully; nil while it runs, or when
	// it died.
	StoppedAt *time.Time `json:"stopped_at"`
	// Live is true when the worker beat within three heartbeat intervals
	// (or its lease TTL, if longer) and has not stopped.
	Live bool `json:"live"`
	// BuildID is the build it runs (runtime.Config.BuildID); "" for a
	// worker of a version before schema 18.
	BuildID string `json:"build_id"`
}

// Orphans is the queued runs of one workflow and queue (and the running
// ones whose lease expired) that no live worker serves: they wait until a
// worker that registers the workflow and serves the queue starts, of their
// build when they are pinned to one.
type Orphans struct {
	// Workflow and Queue say which runs.
	Workflow string `json:"workflow"`
	Queue    string `json:"queue"`
	// Runs counts them.
	Runs int `json:"runs"`
	// OldestCreatedAt is when the oldest of them was started.
	OldestCreatedAt time.Time `json:"oldest_created_at"`
	// Build is the build they are pinned to (sdk.WithPinning), whose
	// workers alone claim them; "" for runs that are not pinned. Pinned runs
	// whose build is gone for good are moved to another with tenure runs
	// move (operator.MoveRuns).
	Build string `json:"build,omitempty"`
}

// MovedRuns is how many runs of one workflow, queue and status a move of
// pinned runs to another build moved (or, in a dry run, would move): see
// operator.MoveRuns and the SQL function move_runs.
type MovedRuns struct {
	Workflow string    `json:"workflow"`
	Queue    string    `json:"queue"`
	Status   RunStatus `json:"status"`
	Runs     int64     `json:"runs"`
}
