package operator

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/schedule"
)

// ErrNoSchedule is returned for a schedule that does not exist.
var ErrNoSchedule = store.ErrNoSchedule

// Schedules lists every schedule (docs/schedules.md), by name, each with
// its next tick and its last run's status.
func (op *Operator) Schedules(ctx context.Context) ([]record.Schedule, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.Schedules(ctx)
}

// Schedule reads schedule name, or returns an error wrapping ErrNoSchedule.
func (op *Operator) Schedule(ctx context.Context, name string) (record.Schedule, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return record.Schedule{}, err
	}
	return op.store.GetSchedule(ctx, name)
}

// ScheduleTicks lists schedule name's ticks decided, newest first, at most
// limit (0: 100): every tick's decision, its lag and its run.
func (op *Operator) ScheduleTicks(ctx context.Context, name string, limit int) ([]record.ScheduleTick, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.ScheduleTicks(ctx, name, limit)
}

// PauseSchedule pauses schedule name: no tick is decided until
// ResumeSchedule; those due meanwhile are then decided as its catch-up
// policy says. Audited with note; from then on, declarations in code no
// longer change the schedule (a person did). It returns an error wrapping
// ErrNoSchedule for one that does not exist.
func (op *Operator) PauseSchedule(ctx context.Context, name, note string) error {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return err
	}
	return op.store.PauseSchedule(ctx, name, true, note)
}

// ResumeSchedule resumes schedule name, paused by PauseSchedule or in SQL,
// audited with note.
func (op *Operator) ResumeSchedule(ctx context.Context, name, note string) error {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return err
	}
	return op.store.PauseSchedule(ctx, name, false, note)
}

// TriggerSchedule starts a run of schedule name now, outside its spec and
// whatever its overlap policy, paused or not: a tick decided triggered at
// the database's time, audited with note. It returns the run's ID.
func (op *Operator) TriggerSchedule(ctx context.Context, name, note string) (uuid.UUID, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return uuid.Nil, err
	}
	return op.store.TriggerSchedule(ctx, name, note)
}

// ErrBackfillRange is returned by BackfillSchedule for a range that ends in
// the future or before it starts, or that holds more than 10,000 ticks.
var ErrBackfillRange = store.ErrBackfillRange

// BackfillSchedule starts a run for each tick of schedule name between
// from and to (zero: now) that has none: the ticks decided missed or
// skipped, and those from before the schedule existed; within the
// schedule's bounds and before its next tick (the workers' to decide). Each is decided
// backfilled, its run of the tick's key, outside the overlap policy, in
// one transaction audited with note. With dryRun it changes nothing and
// returns the ticks it would start. It returns the ticks' nominal times.
func (op *Operator) BackfillSchedule(ctx context.Context, name string, from, to time.Time, dryRun bool, note string) ([]time.Time, error) {
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.BackfillSchedule(ctx, name, from, to, dryRun, note)
}

// SetSchedule creates a schedule, or changes the one of its name, as a
// person does (d as sdk.NewSchedule would declare it; zero fields take the
// defaults): audited with note, and from then on the declarations of code
// no longer change it. It returns the declaration's error for a spec, zone
// or policy it cannot honour. It reports whether anything changed: the
// settings the schedule has already change nothing and take it from no
// declaration.
func (op *Operator) SetSchedule(ctx context.Context, d schedule.Declaration, note string) (changed bool, err error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return false, err
	}
	return op.store.SetSchedule(ctx, d, note)
}

// DeleteSchedule deletes schedule name and its ticks (not their runs),
// audited with note; a worker whose code declares it creates it again at
// its next start (pause it to keep it from ticking). It returns an error
// wrapping ErrNoSchedule for one that does not exist.
func (op *Operator) DeleteSchedule(ctx context.Context, name, note string) error {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return err
	}
	return op.store.DeleteSchedule(ctx, name, note)
}

// ErrNotComputed is returned by BackfillSchedule for a schedule whose next
// tick no worker has computed yet.
var ErrNotComputed = store.ErrNotComputed
