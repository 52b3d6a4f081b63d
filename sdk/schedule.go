package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/engine"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/schedule"
)

// Schedule is a schedule declared in code: a run of its workflow started at
// each tick of its spec, exactly once per tick, by whichever worker decides
// the tick first (no leader: every worker's ticker competes for due
// schedules, each locked by the one that decides it). A worker registers it
// (runtime.Worker.RegisterSchedules); at start, the worker writes it to
// the schedules table, by name, changing the row only when the declaration
// differs and no person changed the schedule since (a pause by hand, say).
// Every tick decided is a row of schedule_ticks (docs/schedules.md).
type Schedule struct {
	decl schedule.Declaration
}

// OverlapPolicy is what a tick due while the schedule's last run is still
// open (queued or running) does.
type OverlapPolicy string

// Overlap policies.
const (
	// OverlapSkip, the default: the tick is decided skipped; no run.
	OverlapSkip OverlapPolicy = schedule.OverlapSkip
	// OverlapBufferOne: the tick waits (decided buffered) and starts when
	// the open run ends; at most one tick waits, later ones are skipped.
	OverlapBufferOne OverlapPolicy = schedule.OverlapBufferOne
	// OverlapBufferAll: every tick waits, in order, up to the buffer's
	// size (WithOverlap's second argument, default 100); later ones are
	// skipped.
	OverlapBufferAll OverlapPolicy = schedule.OverlapBufferAll
	// OverlapAllow: the tick's run starts beside the open one.
	OverlapAllow OverlapPolicy = schedule.OverlapAllow
	// OverlapCancelOther: the open run is asked to cancel (as
	// Client.Cancel does) and the tick's run starts.
	OverlapCancelOther OverlapPolicy = schedule.OverlapCancelOther
)

// CatchupPolicy is what happens to the ticks no worker decided in time: while
// every worker was down, or the schedule was paused.
type CatchupPolicy string

// Catch-up policies. A tick is missed when a newer one is due too by the
// time a worker decides it (a pass decides every due tick at once).
const (
	// CatchupNone: every missed tick is decided missed; only a tick
	// decided within its grace (the shorter of a minute and its
	// interval to the next tick) starts.
	CatchupNone CatchupPolicy = schedule.CatchupNone
	// CatchupLatest, the default: the latest due tick starts, the older
	// ones are decided missed: one catch-up run after any downtime.
	CatchupLatest CatchupPolicy = schedule.CatchupLatest
	// CatchupAll: the due ticks within the catch-up window (default 24
	// hours) start, the most recent ones, at most the catch-up maximum
	// (default 100, at most 1000); the others are missed. They are
	// decided in order, the overlap policy applying between them: with
	// OverlapSkip only the earliest of them starts (the others find its
	// run open), with OverlapAllow or OverlapBufferAll all of them do.
	CatchupAll CatchupPolicy = schedule.CatchupAll
)

// ScheduleOption configures a schedule at declaration.
type ScheduleOption func(*schedule.Declaration)

// InZone sets the IANA time zone of a cron spec's local times (default
// UTC): "0 9 * * MON-FRI" in "Europe/Berlin" is 09:00 Berlin time, summer
// and winter. A local time that does not exist (the spring-forward gap)
// fires once, shifted forward by the gap; one that occurs twice (the
// fall-back hour) fires once, at its first occurrence.
func InZone(zone string) ScheduleOption { return func(d *schedule.Declaration) { d.Zone = zone } }

// OnScheduleQueue sets the queue of the schedule's runs (default "default").
func OnScheduleQueue(queue string) ScheduleOption {
	return func(d *schedule.Declaration) { d.Queue = queue }
}

// WithSchedulePriority sets the priority of the schedule's runs.
func WithSchedulePriority(p int) ScheduleOption {
	return func(d *schedule.Declaration) { d.Priority = p }
}

// WithJitter delays each tick's run by a time in [0, max), the same for a
// tick wherever it is decided (a hash of the schedule's name and the
// tick's time): many schedules of one time spread their runs.
func WithJitter(max time.Duration) ScheduleOption {
	return func(d *schedule.Declaration) { d.Jitter = max }
}

// Between bounds the ticks: none before start, none after end (zero: no
// bound).
func Between(start, end time.Time) ScheduleOption {
	return func(d *schedule.Declaration) {
		if !start.IsZero() {
			d.StartsAt = &start
		}
		if !end.IsZero() {
			d.EndsAt = &end
		}
	}
}

// WithOverlap sets the overlap policy (default OverlapSkip) and, for
// OverlapBufferAll, how many ticks may wait (0: 100).
func WithOverlap(p OverlapPolicy, buffer int) ScheduleOption {
	return func(d *schedule.Declaration) { d.Overlap, d.BufferMax = string(p), buffer }
}

// WithCatchup sets the catch-up policy (default CatchupLatest) and, for
// CatchupAll, the window of ticks it starts (0: 24 hours) and their
// maximum (0: 100; at most 1000).
func WithCatchup(p CatchupPolicy, window time.Duration, maxRuns int) ScheduleOption {
	return func(d *schedule.Declaration) { d.Catchup, d.CatchupWindow, d.CatchupMax = string(p), window, maxRuns }
}

// NewSchedule declares schedule name: a run of wf with input in at each
// tick of spec, a cron spec of 5 fields (minute hour day-of-month month
// day-of-week), 6 with seconds first, a macro (@hourly, @daily, @weekly,
// @monthly, @yearly) or "@every <duration>" (ticks at the multiples of the
// duration since the Unix epoch). It panics, at declaration, on an empty
// name, a spec or zone that does not parse, an unknown policy or an input
// that does not encode (an error wrapping ErrInvalidSchedule, the panic's
// value).
func NewSchedule[In, Out any](name string, wf *Workflow[In, Out], spec string, in In, opts ...ScheduleOption) *Schedule {
	input, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Errorf("sdk.NewSchedule(%q): input: %w: %w", name, err, ErrInvalidSchedule))
	}
	d := schedule.Declaration{Name: name, Spec: spec, Workflow: wf.Name(), Input: input}
	for _, o := range opts {
		o(&d)
	}
	if _, err := d.Checked(); err != nil {
		panic(fmt.Errorf("sdk.NewSchedule(%q): %w: %w", name, err, ErrInvalidSchedule))
	}
	return &Schedule{decl: d}
}

// ErrInvalidSchedule is wrapped by the panic of NewSchedule given a
// declaration it cannot honour.
var ErrInvalidSchedule = errors.New("invalid schedule declaration")

// Name returns the schedule's name.
func (s *Schedule) Name() string { return s.decl.Name }

// Declaration is the schedule as the runtime writes it.
func (s *Schedule) Declaration() schedule.Declaration { return s.decl }

// ScheduledTick reports, inside a workflow, whether its run was started by
// a schedule's tick, and which: the schedule's name and the tick's nominal
// time (not when it was decided or when the run started: a catch-up run
// of a tick missed an hour ago says so). ok is false for any other run,
// and outside a workflow. It reads the run's key: a run started by hand
// with a key of the form schedule:<name>@<RFC 3339 time> reads as a tick
// too.
func ScheduledTick(ctx context.Context) (schedule string, nominal time.Time, ok bool) {
	e, found := engine.ExecutorFrom(ctx)
	if !found {
		return "", time.Time{}, false
	}
	return store.ParseScheduleTickRun(e.RunKey())
}
