package record

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Schedule is a schedule's row (docs/schedules.md): when it ticks, what
// each tick starts, its policies and where it stands.
type Schedule struct {
	// Name names it; Spec and Zone say when it ticks.
	Name string `json:"name"`
	Spec string `json:"spec"`
	Zone string `json:"time_zone"`
	// Workflow, Queue, Input and Priority are what each tick's run is.
	Workflow string          `json:"workflow"`
	Queue    string          `json:"queue"`
	Input    json.RawMessage `json:"input"`
	Priority int             `json:"priority"`
	// Jitter delays each tick's run by up to it.
	Jitter time.Duration `json:"jitter_ns"`
	// StartsAt and EndsAt bound its ticks; nil: no bound.
	StartsAt *time.Time `json:"starts_at"`
	EndsAt   *time.Time `json:"ends_at"`
	// Overlap and BufferMax: what a tick due while the last run is open
	// does. Catchup, CatchupWindow and CatchupMax: what happens to ticks no
	// worker decided in time.
	Overlap       string        `json:"overlap"`
	BufferMax     int           `json:"buffer_max"`
	Catchup       string        `json:"catchup"`
	CatchupWindow time.Duration `json:"catchup_window_ns"`
	CatchupMax    int           `json:"catchup_max"`
	// NextAt is its next tick not decided yet; nil when a worker has yet
	// to compute it, or when it has none (Ended).
	NextAt *time.Time `json:"next_at"`
	// Ended is true when no tick is left (past EndsAt, or a spec that
	// never fires again).
	Ended bool `json:"ended"`
	// LastRunID is the run its last started tick started (nil: none), and
	// LastRunStatus that run's status ("" when it is gone).
	LastRunID     *uuid.UUID `json:"last_run_id"`
	LastRunStatus RunStatus  `json:"last_run_status,omitempty"`
	// Buffered counts its ticks waiting for the last run to end.
	Buffered int `json:"buffered"`
	// PausedAt is when it was paused (nil: it is not), with PauseNote.
	PausedAt  *time.Time `json:"paused_at"`
	PauseNote string     `json:"pause_note,omitempty"`
	// Error is why no worker can compute its ticks (a spec or zone written
	// in SQL that does not parse); "" while they can.
	Error string `json:"error,omitempty"`
	// DeclaredBy is the worker whose code declared it ("" for one made by
	// hand); OverriddenAt is when a person last changed it (nil: never),
	// after which declarations no longer change it.
	DeclaredBy   string     `json:"declared_by,omitempty"`
	OverriddenAt *time.Time `json:"overridden_at"`
	// CreatedAt and UpdatedAt are when it was made and last changed.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ScheduleTick is one tick of a schedule decided (schedule_ticks).
type ScheduleTick struct {
	// Schedule and NominalAt say which tick: its time by the spec.
	Schedule  string    `json:"schedule"`
	NominalAt time.Time `json:"nominal_at"`
	// DecidedAt is when a worker decided it (its lag is DecidedAt -
	// NominalAt), DecidedBy which worker (or role, for a trigger).
	DecidedAt time.Time `json:"decided_at"`
	DecidedBy string    `json:"decided_by"`
	// Decision is started, skipped, missed, buffered, triggered or
	// backfilled.
	Decision string `json:"decision"`
	// RunID is the run it started (nil: none, or a buffered tick not
	// started yet), at StartedAt.
	RunID     *uuid.UUID `json:"run_id"`
	StartedAt *time.Time `json:"started_at"`
	// CancelledRunID is the run its start cancelled (overlap
	// cancel_other); nil for none.
	CancelledRunID *uuid.UUID `json:"cancelled_run_id"`
}
