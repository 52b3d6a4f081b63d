package schedule

import "time"

// Declaration is a schedule as code declares it (sdk.NewSchedule makes
// one) and a worker writes it to the schedules table, by name. Zero fields
// take the table's defaults: zone UTC, queue "default", overlap "skip",
// a buffer of 100, catch-up "latest" over 24 hours, at most 100 runs.
type Declaration struct {
	// Name names the schedule: 1 to 200 bytes, unique in its schema.
	Name string
	// Spec and Zone say when it ticks (see Parse).
	Spec, Zone string
	// Workflow, Queue, Input (JSON) and Priority are what each tick's
	// run is.
	Workflow, Queue string
	Input           []byte
	Priority        int
	// Jitter delays each tick's run by Jitter(Name, tick, Jitter).
	Jitter time.Duration
	// StartsAt and EndsAt, when set, bound the ticks.
	StartsAt, EndsAt *time.Time
	// Overlap is what a tick due while the last run is open does (skip,
	// buffer_one, buffer_all, allow or cancel_other); BufferMax bounds
	// buffer_all's waiting ticks.
	Overlap   string
	BufferMax int
	// Catchup is what happens to the ticks no worker decided in time
	// (none, latest or all); CatchupWindow and CatchupMax bound all's.
	Catchup       string
	CatchupWindow time.Duration
	CatchupMax    int
}
