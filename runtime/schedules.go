package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/sdk"
)

// scheduleEvery is the longest a worker's ticker waits between checks while
// the schema has schedules: a schedule created or changed by hand, or a
// buffered tick whose run ended, is seen within it. Each check is one
// statement; a pass's transaction is opened only when something is due.
const scheduleEvery = time.Second

// scheduleIdle is how long the ticker waits between checks while the
// schema has no schedule at all (or the worker's PollInterval, if longer):
// the first schedule made elsewhere (in SQL, by another worker) has its
// first tick computed within it, from then on.
const scheduleIdle = 10 * time.Second

// scheduleRetryEvery is how often a worker retries the schedules whose
// ticks a worker could not compute (their error set).
const scheduleRetryEvery = time.Minute

// historyEvery is how often a worker's ticker makes the coming days'
// partitions of steps and attempts (store.EnsureHistoryPartitions); every
// worker does, at start too: the function takes turns and makes only what
// is missing. A failed try (most often a lock the function waited 100 ms
// for) is tried again historyRetryFirst later, the wait doubling up to
// historyRetry; its warning is logged at most once per historyRetry.
const (
	historyEvery      = time.Hour
	historyRetryFirst = time.Second
	historyRetry      = time.Minute
)

// partitionTries is what a worker's ticker keeps between its tries to make
// the coming days' partitions: when the next is due, how many failed in a
// row, and when a failure was last logged.
type partitionTries struct {
	next   time.Time
	failed int
	warned time.Time
}

// schedulesPerPass bounds the schedules one pass locks.
const schedulesPerPass = 500

// backfillTimeout bounds a backfill requested in SQL that a worker carries
// out: up to 10,000 runs started in one transaction, longer than a
// statement. The worker's ticker waits for it; the other workers decide
// the ticks meanwhile.
const backfillTimeout = time.Minute

// ScheduleObserver is an optional interface of an Observer (the otel
// package implements it): it hears of every tick of a schedule the worker
// decides, with the decision (started, skipped, missed, buffered: the
// schedule_ticks row's; a buffered tick that gets its run is heard of again
// as started) and its lag, how late it was decided after its nominal time
// by the database's clock.
type ScheduleObserver interface {
	TickDecided(schedule, decision string, lag time.Duration)
}

// RegisterSchedules adds schedules the worker declares at start (see
// sdk.NewSchedule): it writes each to the schedules table by name, changed
// only when it differs from the row and no person changed the row since.
// Every worker decides the due ticks of every schedule, declared by it or
// not: a schedule needs no worker of its own. Registering a name twice, or
// after Run started, is an error.
func (w *Worker) RegisterSchedules(schedules ...*sdk.Schedule) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return fmt.Errorf("register schedules: %w", ErrAlreadyRunning)
	}
	for _, s := range schedules {
		for _, have := range w.schedules {
			if have.Name() == s.Name() {
				return fmt.Errorf("register schedules: schedule %q registered twice", s.Name())
			}
		}
		w.schedules = append(w.schedules, s)
	}
	return nil
}

// declareSchedules writes the registered schedules, at start.
func (w *Worker) declareSchedules(ctx context.Context) error {
	if len(w.schedules) == 0 {
		return nil
	}
	decls := make([]store.ScheduleDecl, len(w.schedules))
	for i, s := range w.schedules {
		decls[i] = s.Declaration()
	}
	if err := w.store.DeclareSchedules(ctx, decls, w.cfg.Label); err != nil {
		return fmt.Errorf("runtime: declare schedules: %w", err)
	}
	return nil
}

// tickSchedules decides the schedules' due ticks until ctx ends: a check at
// the earliest next tick by the database's clock, at least every
// scheduleEvery (scheduleIdle without any schedule), at once again after a
// pass that was full, and at a backfill_schedule's notice. A check that
// finds a backfill requested in SQL waiting carries it out after the pass
// (then checks again at once: another may wait). A pass that
// fails is retried after scheduleEvery, its error logged as the worker's
// other paths' are.
func (w *Worker) tickSchedules(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	warned := map[string]time.Time{} // schedules whose ticks this worker cannot compute, when last warned of
	var retried time.Time
	var parts partitionTries
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-w.listener.backfills:
		}
		if ctx.Err() != nil { // select picks at random among the ready
			return
		}
		if !time.Now().Before(parts.next) {
			w.ensurePartitions(ctx, &parts)
		}
		wait := scheduleEvery
		// A pass begun is finished, shutdown or not, so that every tick it
		// commits is heard of by the observer (a pass cut off by the
		// shutdown could commit its ticks and lose its answer).
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.StatementTimeout)
		retry := time.Since(retried) >= scheduleRetryEvery
		if retry {
			retried = time.Now()
		}
		pass, err := w.store.DecideTicks(pctx, w.cfg.Label, schedulesPerPass, retry)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			w.ticks.failed(err)
		default:
			w.ticks.ok()
			if o, ok := w.cfg.Observer.(ScheduleObserver); ok {
				for _, t := range pass.Ticks {
					o.TickDecided(t.Schedule, t.Decision, t.Lag)
				}
			}
			for name, why := range pass.Errors {
				if time.Since(warned[name]) < time.Minute {
					continue
				}
				warned[name] = time.Now()
				w.cfg.Logger.Warn("tenure: this worker cannot compute a schedule's ticks: it leaves them to workers that can "+
					"(schedules.error says why; fix the spec or zone, or deploy a build that reads it)",
					"worker", w.cfg.Label, "schedule", name, "error", why)
			}
			switch {
			case pass.Full:
				wait = 0
			case pass.Empty:
				wait = max(scheduleIdle, w.cfg.PollInterval)
			case pass.Next > 0:
				wait = min(pass.Next, scheduleEvery)
			}
			if pass.Backfill && w.carryOutBackfill(ctx, retry) {
				wait = 0
			}
		}
		timer.Reset(min(wait, max(time.Until(parts.next), 0)))
	}
}

// ensurePartitions makes the coming days' partitions of steps and attempts
// and sets when the next try is due: historyEvery later, or, after a
// failure, historyRetryFirst later, doubling with each failure in a row up
// to historyRetry, so that a worker that starts beside a long lock still
// makes them within seconds of its release. A failure is logged, at most
// once per historyRetry: the runs of a day without a partition go to the
// DEFAULT one, which later partitions must not find full.
func (w *Worker) ensurePartitions(ctx context.Context, p *partitionTries) {
	pctx, cancel := context.WithTimeout(ctx, w.cfg.StatementTimeout)
	made, err := w.store.EnsureHistoryPartitions(pctx)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return
	case err != nil:
		wait := min(historyRetryFirst<<min(p.failed, 6), historyRetry)
		p.failed++
		p.next = time.Now().Add(wait)
		if time.Since(p.warned) >= historyRetry {
			p.warned = time.Now()
			w.cfg.Logger.Warn("tenure: could not make the coming days' partitions of steps and attempts; retrying within a minute "+
				"(runs of a day without one go to steps_default and attempts_default; SELECT ensure_history_partitions() makes them by hand)",
				"worker", w.cfg.Label, "failures_in_a_row", p.failed, "next_try_in", wait, "error", err)
		}
		return
	case len(made) > 0:
		w.cfg.Logger.Info("tenure: made partitions of steps and attempts", "worker", w.cfg.Label, "partitions", made)
	}
	if p.failed > 0 {
		w.cfg.Logger.Info("tenure: made the coming days' partitions of steps and attempts after failed tries",
			"worker", w.cfg.Label, "failures_in_a_row", p.failed)
	}
	p.failed, p.warned = 0, time.Time{}
	p.next = time.Now().Add(historyEvery)
}

// carryOutBackfill carries out one backfill requested in SQL, if one still
// waits (another worker may have taken it), within backfillTimeout, and
// logs its outcome; it reports whether it took one. One whose transaction
// failed is recorded so (FailBackfill): tried again in a minute, not at
// the next check.
func (w *Worker) carryOutBackfill(ctx context.Context, retry bool) bool {
	bctx, cancel := context.WithTimeout(ctx, max(backfillTimeout, w.cfg.StatementTimeout))
	req, ok, err := w.store.CarryOutBackfill(bctx, w.cfg.Label, retry)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
	case err != nil:
		w.ticks.failed(err)
		if ok {
			fctx, cancel := context.WithTimeout(ctx, w.cfg.StatementTimeout)
			if err := w.store.FailBackfill(fctx, req.ID, w.cfg.Label, err.Error()); err != nil && ctx.Err() == nil {
				w.ticks.failed(err)
			}
			cancel()
		}
	case !ok:
	case req.Done && req.Error == "":
		w.cfg.Logger.Info("tenure: carried out a backfill requested in SQL", "worker", w.cfg.Label, "schedule", req.Schedule,
			"request", req.ID, "started", len(req.Ticks))
	case req.Done:
		w.cfg.Logger.Warn("tenure: refused a backfill requested in SQL (schedule_backfills.error says why)", "worker", w.cfg.Label,
			"schedule", req.Schedule, "request", req.ID, "error", req.Error)
	default:
		w.cfg.Logger.Warn("tenure: this worker cannot carry out a backfill requested in SQL: it leaves it to workers that can, "+
			"and tries again in a minute (schedule_backfills.error says why)",
			"worker", w.cfg.Label, "schedule", req.Schedule, "request", req.ID, "error", req.Error)
	}
	return ok
}
