package schedule

import (
	"encoding/json"
	"fmt"
	"time"
)

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

// Overlap policies (Declaration.Overlap): what a tick due while the
// schedule's last run is open does.
const (
	OverlapSkip        = "skip"
	OverlapBufferOne   = "buffer_one"
	OverlapBufferAll   = "buffer_all"
	OverlapAllow       = "allow"
	OverlapCancelOther = "cancel_other"
)

// Catch-up policies (Declaration.Catchup): which of the ticks no worker
// decided in time start.
const (
	CatchupNone   = "none"
	CatchupLatest = "latest"
	CatchupAll    = "all"
)

// MaxCatchup is the most runs a catch-up of policy all starts.
const MaxCatchup = 1000

// Checked returns d with its zero fields filled, or why it cannot be
// declared: a name, workflow, spec or zone that does not parse, an unknown
// policy, a negative bound, a catch-up over MaxCatchup, an end before the
// start, an input that is not JSON.
func (d Declaration) Checked() (Declaration, error) {
	if d.Zone == "" {
		d.Zone = "UTC"
	}
	if d.Queue == "" {
		d.Queue = "default"
	}
	if d.Input == nil {
		d.Input = []byte("null")
	}
	if d.Overlap == "" {
		d.Overlap = OverlapSkip
	}
	if d.Catchup == "" {
		d.Catchup = CatchupLatest
	}
	if d.BufferMax == 0 {
		d.BufferMax = 100
	}
	if d.CatchupWindow == 0 {
		d.CatchupWindow = 24 * time.Hour
	}
	if d.CatchupMax == 0 {
		d.CatchupMax = 100
	}
	switch {
	case d.Name == "" || len(d.Name) > 200:
		return d, fmt.Errorf("schedule %q: the name must be 1 to 200 bytes", d.Name)
	case d.Workflow == "":
		return d, fmt.Errorf("schedule %q: no workflow", d.Name)
	case d.Jitter < 0, d.BufferMax < 0, d.CatchupWindow < 0, d.CatchupMax < 0:
		return d, fmt.Errorf("schedule %q: jitter, buffer, catch-up window and maximum must not be negative", d.Name)
	case d.CatchupMax > MaxCatchup:
		return d, fmt.Errorf("schedule %q: a catch-up of at most %d runs, not %d", d.Name, MaxCatchup, d.CatchupMax)
	case d.StartsAt != nil && d.EndsAt != nil && !d.EndsAt.After(*d.StartsAt):
		return d, fmt.Errorf("schedule %q: it ends (%s) before it starts (%s)", d.Name, d.EndsAt, d.StartsAt)
	case !json.Valid(d.Input):
		return d, fmt.Errorf("schedule %q: the input is not JSON", d.Name)
	}
	switch d.Overlap {
	case OverlapSkip, OverlapBufferOne, OverlapBufferAll, OverlapAllow, OverlapCancelOther:
	default:
		return d, fmt.Errorf("schedule %q: unknown overlap policy %q (want skip, buffer_one, buffer_all, allow or cancel_other)", d.Name, d.Overlap)
	}
	switch d.Catchup {
	case CatchupNone, CatchupLatest, CatchupAll:
	default:
		return d, fmt.Errorf("schedule %q: unknown catch-up policy %q (want none, latest or all)", d.Name, d.Catchup)
	}
	if _, err := Parse(d.Spec, d.Zone); err != nil {
		return d, fmt.Errorf("schedule %q: %w", d.Name, err)
	}
	return d, nil
}
