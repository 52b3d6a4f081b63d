package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/committer"
	"github.com/tenurehq/tenure/internal/listener"
	"github.com/tenurehq/tenure/internal/override"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// The cancellation causes of a run's context.
var (
	errShutdown  = activities.ErrWorkerShutdown
	errLeaseLost = activities.ErrLeaseLost
)

// ErrAlreadyRunning is returned by Run when the worker is already running, and
// by Register after Run started.
var ErrAlreadyRunning = errors.New("worker already running")

// Stats counts what a worker did since it was created.
type Stats struct {
	Claimed    int64 // leases taken (new runs, resumptions and rescues)
	Completed  int64 // runs completed
	Failed     int64 // runs failed (each has a failure row)
	Cancelled  int64 // runs ended cancelled after their Cancel
	Suspended  int64 // runs released with a durable delay, or to wait for a signal or a child
	Released   int64 // runs handed back at shutdown
	LeasesLost int64 // runs abandoned because their lease moved on
	Attempts   int64 // activity attempts started
	// Commits counts the transactions that carried the runs' writes, and
	// Writes the runs' writes they carried: Writes/Commits is how many runs
	// shared each commit (see docs/benchmarks.md).
	Commits, Writes int64
	// DatabaseErrors counts the database errors of claims, lease renewals
	// and runs' writes (each was retried; none is charged to a run's
	// budgets). Health says whether they still fail.
	DatabaseErrors int64
}

// ErrNotRunning is what Health returns for a worker that is not running:
// not started yet, stopped, or unable to start.
var ErrNotRunning = errors.New("worker not running")

// troubleLogEvery is how often a database error that keeps repeating on one
// of the worker's paths is logged again.
const troubleLogEvery = 30 * time.Second

// Worker claims and executes runs of the workflows registered on it.
// Create it with NewWorker, register workflows, then call Start, which
// returns start-up errors and runs the worker in the background, and
// Shutdown to drain it (or Run, which blocks until the worker stops).
type Worker struct {
	cfg       Config
	store     *store.Store
	committer *committer.Committer // every fenced write of every run goes through it

	mu        sync.Mutex
	workflows map[string]sdk.Definition
	running   map[uuid.UUID]*execution
	started   bool
	// overrides replaces activities' functions (package tenuretest); set
	// once, from the context of Run or Start, before any run is claimed.
	overrides override.Table
	policies  *policies // the activities' resolved policies

	wake      chan struct{}        // a slot freed or a run was announced
	stopClaim chan struct{}        // closed when the worker stops taking new runs
	names     []string             // the registered workflows, sorted, once started
	timers    map[*time.Timer]bool // wakeAt's, stopped with the worker (under mu)
	id        uuid.UUID            // the worker process's ID in the registry
	// registryOff is set when the worker cannot write its registry row.
	registryOff atomic.Bool
	stopOnce    sync.Once
	interrupt   context.CancelCauseFunc // cancels every execution with errShutdown
	draining    atomic.Bool
	done        chan struct{} // closed when Run has returned
	runs        sync.WaitGroup
	// idleRuns hands a run to a goroutine of an earlier run that is waiting
	// for another (see goRun); runLoops counts those goroutines, which end
	// when stopRuns is closed.
	idleRuns chan func()
	stopRuns chan struct{}
	runLoops sync.WaitGroup

	claimed, completed, failed, cancelled, suspended, released, leasesLost, attempts atomic.Int64
	dbErrors                                                                         atomic.Int64

	// Wakes (store.ApplyWakes): wakesDue is set by a notice of one, by a
	// LISTEN taking effect and by wakes left busy; cancelsDue by a LISTEN
	// taking effect, for the held runs' cancels whose notices it missed.
	// lastWakes is when the claim loop last applied them, and busyWakes
	// whether it left some busy (its goroutine's alone): at least every
	// wakeEvery, whatever the notices.
	wakesDue, cancelsDue atomic.Bool
	lastWakes            time.Time
	busyWakes            bool

	replication atomic.Pointer[record.Replication] // as last read (Replication)

	// The worker's paths to the database, each retried with backoff while
	// it fails: Health reports them.
	claims, renewals, writes, wakeTrouble *trouble
	waiting                               atomic.Int64 // runs whose write is being retried
	abandoned                             atomic.Bool  // Shutdown gave up: leases are no longer renewed
	serving                               atomic.Bool  // between the start of Run and its return
}

// NewWorker returns a worker on pool, or the configuration error: a nil
// pool, an invalid schema name, an out-of-range duration or count, a bad
// default policy. It sends nothing to the database: Run and Start check the
// schema.
func NewWorker(pool *pgxpool.Pool, cfg Config) (*Worker, error) {
	if pool == nil {
		return nil, errors.New("runtime.NewWorker: nil pool")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	st, err := store.New(pool, store.WithSchema(cfg.Schema))
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:       cfg,
		store:     st,
		workflows: map[string]sdk.Definition{},
		running:   map[uuid.UUID]*execution{},
		wake:      make(chan struct{}, 1),
		stopClaim: make(chan struct{}),
		id:        uuid.New(),
		done:      make(chan struct{}),
		policies:  &policies{defaults: cfg.Defaults},
		idleRuns:  make(chan func()),
		stopRuns:  make(chan struct{}),
	}
	w.committer = committer.New(committer.Config{
		Store: w.store, Connect: w.connect, Timeout: w.cfg.StatementTimeout,
	})
	observe := func(path string, err error) {
		w.dbErrors.Add(1)
		if o, ok := w.cfg.Observer.(DatabaseObserver); ok {
			o.DatabaseError(path, err)
		}
	}
	log := w.cfg.Logger.With("worker", w.cfg.Label)
	w.claims = newTrouble("claim runs", troubleLogEvery, log, observe)
	w.renewals = newTrouble("renew leases", troubleLogEvery, log, observe)
	w.writes = newTrouble("write runs", troubleLogEvery, log, observe)
	w.wakeTrouble = newTrouble("apply wakes", troubleLogEvery, log, observe)
	return w, nil
}

// DatabaseObserver is an optional interface of an Observer (the otel
// package implements it): it hears of every database error of a worker's
// claims ("claim runs"), lease renewals ("renew leases"), runs' writes
// ("write runs") and applications of wakes ("apply wakes": signals sent,
// cancels asked), each of which the worker retries.
type DatabaseObserver interface {
	DatabaseError(path string, err error)
}

// Health reports whether the worker can do its work, for a readiness probe:
// nil while it runs and its claims, lease renewals and runs' writes reach
// the database; else ErrNotRunning, or an error naming each failing path,
// since when, and its last database error (a permission denied, a full disk,
// a lost connection). A failing path is retried with backoff, and a run
// whose write fails keeps its lease and waits (nothing is charged to its
// budgets), so a worker reporting trouble needs its database fixed, not a
// restart. With Config.RequireSynchronousReplication it also reports a
// server whose commits are not synchronously replicated while it has
// standbys (see Replication); without it, that is only logged, once, and
// counted (otel: tenure.database.replication.asynchronous).
func (w *Worker) Health() error {
	if !w.serving.Load() {
		return ErrNotRunning
	}
	if w.abandoned.Load() {
		return fmt.Errorf("tenure worker %s: Shutdown gave up handing runs back; their leases are no longer renewed: %w", w.cfg.Label, ErrNotRunning)
	}
	err := errors.Join(w.claims.state(), w.renewals.state(), w.writes.state(), w.wakeTrouble.state(), w.replicationHealth())
	if err != nil {
		return fmt.Errorf("tenure worker %s unhealthy (%d runs waiting to write): %w", w.cfg.Label, w.waiting.Load(), err)
	}
	return nil
}

// Label returns the worker's label.
func (w *Worker) Label() string { return w.cfg.Label }

// Register adds workflows the worker executes. Only runs of registered
// workflows are claimed: a run of a workflow no worker knows waits, queued
// and visible in SQL. Registering twice the same name, or after Run started,
// is an error.
func (w *Worker) Register(defs ...sdk.Definition) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return fmt.Errorf("register: %w", ErrAlreadyRunning)
	}
	for _, d := range defs {
		if _, dup := w.workflows[d.Name()]; dup {
			return fmt.Errorf("register: workflow %q registered twice", d.Name())
		}
		w.workflows[d.Name()] = d
	}
	return nil
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	return Stats{
		Claimed: w.claimed.Load(), Completed: w.completed.Load(), Failed: w.failed.Load(), Cancelled: w.cancelled.Load(),
		Suspended: w.suspended.Load(), Released: w.released.Load(), LeasesLost: w.leasesLost.Load(),
		Attempts: w.attempts.Load(), Commits: w.committer.Commits(), Writes: w.committer.Writes(),
		DatabaseErrors: w.dbErrors.Load(),
	}
}

// Run claims and executes runs until ctx ends or Shutdown is called, and
// returns when every run it held is finished or handed back. When ctx ends,
// running attempts are interrupted at once (use Shutdown to drain first).
// Start is the same, in the background.
func (w *Worker) Run(ctx context.Context) error {
	serve, err := w.prepare(ctx)
	if err != nil {
		return err
	}
	serve()
	return nil
}

// Start checks what Run checks at start-up (registered workflows, the schema, a database connection) and returns that error, then
// runs the worker in the background until ctx ends or Shutdown is called.
// Shutdown waits for it.
func (w *Worker) Start(ctx context.Context) error {
	serve, err := w.prepare(ctx)
	if err != nil {
		return err
	}
	go serve()
	return nil
}

// prepare does the start-up checks and returns the function that runs the
// worker; w.done is closed when the worker has stopped, or at once when
// prepare fails after marking the worker started.
func (w *Worker) prepare(ctx context.Context) (serve func(), err error) {
	names, err := w.start()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.stop()
			close(w.done)
		}
	}()
	if err := w.store.Check(ctx); err != nil {
		return nil, err
	}
	w.overrides = override.From(ctx)
	// The heartbeat has its own connection, open before any run is claimed.
	hb, err := w.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("runtime: heartbeat connection: %w", err)
	}
	w.names = names
	w.register(ctx, hb)
	w.checkReplication(ctx, hb)
	base, interrupt := context.WithCancelCause(context.WithoutCancel(ctx))
	w.mu.Lock()
	w.interrupt = interrupt
	w.mu.Unlock()
	w.serving.Store(true)
	return func() {
		defer close(w.done)
		defer w.serving.Store(false)
		defer interrupt(nil)
		w.committer.Start()
		defer w.committer.Stop() // after every run's last write
		loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
		var bg sync.WaitGroup
		bg.Go(func() { w.listen(loops) })
		bg.Go(func() { w.heartbeat(loops, hb) })

		w.claimLoop(ctx, base, names)
		if ctx.Err() != nil {
			interrupt(errShutdown)
		}
		w.runs.Wait() // the heartbeat keeps renewing leases while runs finish
		close(w.stopRuns)
		w.runLoops.Wait()
		stopLoops()
		bg.Wait()
		// The registry's last word: stopped, not dead.
		if row := w.registryRow(0, true); row != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.StatementTimeout)
			if err := w.store.Beat(sctx, w.store.Pool(), *row); err != nil {
				w.cfg.Logger.Warn("tenure: could not mark the worker stopped in the registry; it will read as dead after three heartbeats",
					"worker", w.cfg.Label, "error", err)
			}
			cancel()
		}
	}, nil
}

// register writes the worker's first registry row, and removes the rows of
// workers gone for a week. The registry is for people: a worker that cannot
// write it (a role without the grant) runs without it, and says so once.
func (w *Worker) register(ctx context.Context, conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StatementTimeout)
	defer cancel()
	if err := w.store.Beat(ctx, conn, *w.registryRow(0, false)); err != nil {
		w.registryFailed(err)
		return
	}
	if err := w.store.PruneWorkers(ctx, conn); err != nil {
		w.cfg.Logger.Warn("tenure: could not prune the worker registry", "worker", w.cfg.Label, "error", err)
	}
}

// registryRefused reports whether the server refused the registry's row
// itself: a privilege, a missing table or column, a constraint or bad data
// (SQLSTATE classes 42, 23 and 22). A statement timeout or an admin
// shutdown is an outage of the whole statement, not a reason to run
// without the registry for the worker's life.
func registryRefused(err error) bool {
	class := sqlState(err)
	if len(class) < 2 {
		return false
	}
	class = class[:2]
	return class == "42" || class == "23" || class == "22"
}

// registryFailed turns the registry off for this worker after a write of
// its row failed: its leases must never depend on it.
func (w *Worker) registryFailed(err error) {
	if w.registryOff.CompareAndSwap(false, true) {
		w.cfg.Logger.Warn("tenure: the worker cannot write its row in the worker registry and runs without it: "+
			"tenure workers will not list it, and its workflows' runs may be reported as served by no live worker "+
			"(grant the worker's role INSERT, UPDATE, DELETE on the workers table: docs/operations.md, Database roles)",
			"worker", w.cfg.Label, "error", err)
	}
}

// registryRow is the worker's row in the registry (store.WorkerBeat), nil
// once the registry is off for this worker.
func (w *Worker) registryRow(held int, stopped bool) *store.WorkerBeat {
	if w.registryOff.Load() {
		return nil
	}
	return &store.WorkerBeat{
		ID: w.id, Label: w.cfg.Label, Host: hostname, PID: os.Getpid(), Version: sdk.Version,
		Workflows: w.names, Queues: w.cfg.Queues, Concurrency: w.cfg.Concurrency, Held: held,
		Interval: w.cfg.HeartbeatInterval, TTL: w.cfg.LeaseTTL, Stopped: stopped,
	}
}

// hostname is the machine's name, for the registry.
var hostname = func() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}()

func (w *Worker) start() ([]string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return nil, ErrAlreadyRunning
	}
	if len(w.workflows) == 0 {
		return nil, errors.New("runtime: no workflows registered")
	}
	w.started = true
	names := make([]string, 0, len(w.workflows))
	for n := range w.workflows {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func (w *Worker) stop() {
	w.stopOnce.Do(func() {
		w.draining.Store(true)
		close(w.stopClaim)
		w.mu.Lock()
		for t := range w.timers {
			t.Stop()
		}
		w.timers = nil
		w.mu.Unlock()
	})
}

// Shutdown stops claiming, lets running attempts finish until ctx ends, then
// interrupts the rest: their attempts are recorded interrupted (charged to no
// budget) and their runs released for another worker. A run whose attempt
// finishes during the drain is released before its next attempt.
//
// Shutdown is bounded by ctx even when the database cannot be reached: when
// ctx has a deadline, the interruption starts a hand-off time before it
// (StatementTimeout, at most 2s, at most half the time left), so that the
// runs are released by the deadline and Shutdown returns by then; when ctx
// is cancelled instead, the hand-off gets that time after it. A run
// not handed back by then is no longer renewed: it keeps running in the
// background until its lease runs out (its writes' retries end with it), and
// is rescued from its last checkpoint by another worker;
// Shutdown then returns an error saying how many. It returns nil when every
// run finished or was handed back within the drain, else ctx's error.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	w.stop()
	handoff := min(w.cfg.StatementTimeout, 2*time.Second)
	drain := ctx
	if deadline, ok := ctx.Deadline(); ok {
		// At most half of what is left goes to the hand-off.
		lead := min(handoff, time.Until(deadline)/2)
		var cancel context.CancelFunc
		drain, cancel = context.WithDeadline(ctx, deadline.Add(-lead))
		defer cancel()
	}
	select {
	case <-w.done:
		return nil
	case <-drain.Done():
	}
	w.mu.Lock()
	interrupt := w.interrupt
	w.mu.Unlock()
	if interrupt != nil {
		interrupt(errShutdown)
	}
	// The hand-off: until ctx ends, or for handoff once it has.
	hctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), handoff)
		defer cancel()
	}
	cut := ctx.Err()
	if cut == nil {
		cut = context.DeadlineExceeded // interrupted a hand-off time before the deadline
	}
	select {
	case <-w.done:
		return cut
	case <-hctx.Done():
	}
	w.mu.Lock()
	n := len(w.running)
	w.mu.Unlock()
	w.abandoned.Store(true) // no more renewals: the leases expire, and with them the writes' retries
	return fmt.Errorf("%w: %d runs not handed back in time (the database is slow or unreachable); each is rescued once its lease expires", cut, n)
}

// signal wakes the claim loop without blocking.
func (w *Worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// wakeAt wakes the claim loop d from now, when that is sooner than its next
// poll could be: a run it suspended until then (a receive's timeout, a
// sleep) is claimed on time rather than up to a PollInterval late. Later
// times are left to the poll; the timers stop with the worker.
func (w *Worker) wakeAt(d time.Duration) {
	if d <= 0 || d > w.cfg.PollInterval {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.draining.Load() {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d+time.Millisecond, func() { // just after the due time, by the database's clock too
		w.signal()
		w.mu.Lock()
		delete(w.timers, t)
		w.mu.Unlock()
	})
	if w.timers == nil {
		w.timers = map[*time.Timer]bool{}
	}
	w.timers[t] = true
}

// claimLoop claims runs while there are free slots, until stopped. While
// claims fail it backs off, deaf to wake-ups: every finished run and every
// notice would otherwise retry at once.
func (w *Worker) claimLoop(ctx, base context.Context, names []string) {
	ticker := time.NewTicker(w.cfg.PollInterval)
	defer ticker.Stop()
	bo := newBackoff(max(w.cfg.PollInterval, 10*time.Millisecond), 30*time.Second)
	for {
		full, err := w.claimOnce(ctx, base, names)
		if err != nil {
			if !sleep(ctx, bo.delay(), w.stopClaim) {
				if ctx.Err() != nil {
					w.stop()
				}
				return
			}
			continue
		}
		bo.reset()
		if full {
			continue // a full batch: more may be due
		}
		select {
		case <-ctx.Done():
			w.stop()
			return
		case <-w.stopClaim:
			return
		case <-w.wake:
		case <-ticker.C:
		}
	}
}

// wakeEvery is how often a worker applies the wakes (store.ApplyWakes)
// when no notice tells it of one: what a lost notice can delay a signal's
// wake-up, or the record of a cancel.
const wakeEvery = time.Second

// claimOnce fills free slots, after applying the wakes when they are due
// (then even with no slot free); it reports whether it got as many runs as it
// asked for, or the claim's error.
func (w *Worker) claimOnce(ctx, base context.Context, names []string) (full bool, _ error) {
	if w.draining.Load() || ctx.Err() != nil {
		return false, nil
	}
	w.mu.Lock()
	free := w.cfg.Concurrency - len(w.running)
	var held []uuid.UUID
	cancels := w.cancelsDue.Swap(false)
	if cancels {
		for id := range w.running {
			held = append(held, id)
		}
	}
	w.mu.Unlock()
	wake := w.wakesDue.Swap(false) || cancels || time.Since(w.lastWakes) >= wakeEvery
	if free <= 0 && !wake {
		return false, nil
	}
	began := time.Now()
	cctx, cancel := context.WithTimeout(ctx, w.cfg.StatementTimeout)
	var claimed []store.Claimed
	var woken store.Woken
	var err error
	if wake {
		claimed, woken, err = w.store.ClaimWaking(cctx, held, names, w.cfg.Queues, max(free, 0), w.cfg.Label, w.cfg.LeaseTTL)
		var pgErr *pgconn.PgError
		if err != nil && errors.As(err, &pgErr) && ctx.Err() == nil {
			// The server refused the wakes' statements (a role without
			// the grants on wakes, say): claims must not wait for them.
			// They are tried again at the next poll, and said wrong in
			// Health; the claim goes on alone.
			w.wakeTrouble.failed(err)
			w.lastWakes = began
			claimed, woken, err = nil, store.Woken{}, nil
			if free > 0 {
				claimed, err = w.store.Claim(cctx, names, w.cfg.Queues, free, w.cfg.Label, w.cfg.LeaseTTL)
			}
			wake = false
		} else if err == nil {
			w.wakeTrouble.ok()
		}
	} else {
		claimed, err = w.store.Claim(cctx, names, w.cfg.Queues, free, w.cfg.Label, w.cfg.LeaseTTL)
	}
	cancel()
	if err != nil {
		if wake { // not applied: the next try
			w.wakesDue.Store(true)
			w.cancelsDue.Store(w.cancelsDue.Load() || cancels)
		}
		if ctx.Err() != nil {
			return false, nil
		}
		// A claim whose outcome is unknown (the connection was lost during
		// its commit) may have taken runs: their leases expire unrenewed and
		// they are reclaimed, with no attempt lost.
		w.claims.failed(err)
		return false, err
	}
	w.claims.ok()
	if wake {
		w.lastWakes = began
		w.woken(woken)
	}
	for _, c := range claimed {
		w.claimed.Add(1)
		e := w.newExecution(base, c, began)
		w.mu.Lock()
		old := w.running[c.ID]
		w.running[c.ID] = e
		w.mu.Unlock()
		if old != nil {
			// This worker held the run under an older lease, which expired
			// (it froze, or its lease was ended for it): that execution is
			// no longer heartbeated, so it is stopped here, as a renewal
			// missing its lease would.
			old.lose("the run was reclaimed under a newer lease")
		}
		w.goRun(func() {
			defer func() {
				w.mu.Lock()
				if w.running[c.ID] == e { // this worker may hold the run again under a newer lease
					delete(w.running, c.ID)
				}
				w.mu.Unlock()
				w.signal()
			}()
			e.run()
		})
	}
	return free > 0 && len(claimed) == free, nil
}

// woken acts on what applying the wakes found: the held runs whose cancel
// was asked are cancelled (their notices were missed), and wakes whose
// rows were busy are tried again soon (a commit in flight ends in
// milliseconds), then, while they stay busy (a caller's open transaction),
// at each poll.
func (w *Worker) woken(woken store.Woken) {
	for _, id := range woken.Cancelled {
		w.mu.Lock()
		e := w.running[id]
		w.mu.Unlock()
		if e != nil {
			e.requestCancel()
		}
	}
	if woken.Applied >= store.WakesApplied {
		w.wakesDue.Store(true) // more may be waiting: at once
		w.signal()
	}
	if woken.Left > 0 && !w.busyWakes {
		w.wakesDue.Store(true)
		w.wakeAt(wakeRetry)
	}
	w.busyWakes = woken.Left > 0
}

// wakeRetry is how soon wakes left busy are tried again.
const wakeRetry = 20 * time.Millisecond

// goRun runs f, a claimed run's execution, on a goroutine that an earlier
// run has finished with, when one is waiting, or on a new one. A run's
// goroutine grows its stack to the depth of the workflow and its steps
// (JSON decoding, the write path): a new goroutine per run paid that growth
// every time (runtime.newstack was 17% of a worker's CPU per one-step run).
// A goroutine whose run ends by runtime.Goexit (the executor unwinding the
// workflow) ends with it. The goroutines waiting for runs end when the
// worker stops (stopRuns). A run's slot is freed (the claim loop woken)
// just before its goroutine waits for the next, so a claim may find none
// waiting yet and start another: there are at most about twice Concurrency.
// A goroutine carries over nothing of a run but what code of the run left
// on it: its pprof labels are reset; an OS thread an activity locked to it
// (runtime.LockOSThread without UnlockOSThread) stays locked for the runs
// after, where a goroutine of its own would have ended with it.
func (w *Worker) goRun(f func()) {
	w.runs.Add(1)
	task := func() {
		defer w.runs.Done()
		f()
	}
	select {
	case w.idleRuns <- task:
	default:
		w.runLoops.Add(1)
		go w.runLoop(task)
	}
}

func (w *Worker) runLoop(task func()) {
	defer w.runLoops.Done()
	for {
		task()
		task = nil // nothing of the run kept while waiting
		pprof.SetGoroutineLabels(context.Background())
		select {
		case task = <-w.idleRuns:
		case <-w.stopRuns:
			return
		}
	}
}

// listen wakes the claim loop when a run is announced. It reconnects while
// the database is unreachable and stops for good when its notices do not
// arrive (a transaction pooler, see package listener), or not at all with
// PollOnly: the claim loop's poll finds every run anyway, only later.
func (w *Worker) listen(ctx context.Context) {
	if w.cfg.PollOnly {
		return
	}
	_ = listener.Run(ctx, listener.Config{
		Channel: w.store.RunsChannel(),
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			if w.cfg.ListenConfig != nil {
				return pgx.ConnectConfig(ctx, w.cfg.ListenConfig.Copy())
			}
			return w.connect(ctx)
		},
		Send:      w.store.Notify,
		Dropped:   w.store.Dropped,
		Listening: w.listening,
		Notify:    w.notified,
		Retry:     w.cfg.PollInterval,
		Timeout:   w.cfg.StatementTimeout, // connecting and LISTEN; the wait for notices has none
		Logger:    w.cfg.Logger,
		What:      "run notifications",
		Meanwhile: fmt.Sprintf("polling every %s", w.cfg.PollInterval),
		Fix: "Give the worker a direct connection to PostgreSQL for LISTEN (runtime.Config.ListenConfig), " +
			"or set runtime.Config.PollOnly to poll without listening (docs/operations.md, Connection poolers).",
		Attrs: []any{"worker", w.cfg.Label},
	})
}

// listening is called each time the worker's LISTEN takes effect: what was
// announced before is claimed, the wakes applied, and the cancels of the runs
// it holds read again, so that a cancel whose notice it missed (sent before
// this LISTEN, or while it reconnected) is not left for the next heartbeat.
func (w *Worker) listening() {
	w.wakesDue.Store(true)
	w.cancelsDue.Store(true)
	w.signal()
}

// notified handles a notice on the runs channel: a run to claim (any
// payload), a wake to apply ("wake", a signal sent), or the Cancel of a run
// ("cancel:<id>"), which the worker holding it carries out at once, and
// which is a wake too.
func (w *Worker) notified(payload string) {
	if id, ok := strings.CutPrefix(payload, "cancel:"); ok {
		w.wakesDue.Store(true)
		if run, err := uuid.Parse(id); err == nil {
			w.mu.Lock()
			e := w.running[run]
			w.mu.Unlock()
			if e != nil {
				e.requestCancel()
			}
		}
	} else if payload == "wake" {
		w.wakesDue.Store(true)
	}
	w.signal()
}

// connect opens a connection of the worker's own, outside the pool, with the
// pool's settings: the LISTEN and heartbeat connections never take a slot
// that runs need, and runs holding every slot cannot starve them. It gives up
// after StatementTimeout.
func (w *Worker) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StatementTimeout)
	defer cancel()
	return pgx.ConnectConfig(ctx, w.store.Pool().Config().ConnConfig.Copy())
}

// heartbeat renews every held lease in one statement per interval, and stops
// the runs whose lease is gone, or whose lease it could not renew in time. It
// uses a connection of its own: activities holding every pooled connection
// (transactional ones do, for their whole call) must not starve it. A
// renewal that fails is tried again with backoff, sooner than the next beat;
// each try gives up in time to stop, before its lease can expire, a run it
// could not renew.
func (w *Worker) heartbeat(ctx context.Context, conn *pgx.Conn) {
	timer := time.NewTimer(w.cfg.HeartbeatInterval)
	defer timer.Stop()
	defer func() {
		if conn != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
	}()
	bo := newBackoff(min(100*time.Millisecond, w.cfg.HeartbeatInterval), w.cfg.HeartbeatInterval)
	checked := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		next := w.cfg.HeartbeatInterval
		if err := w.beat(ctx, &conn); err != nil {
			next = bo.delay()
		} else {
			bo.reset()
			if conn != nil && time.Since(checked) >= ReplicationCheckInterval {
				checked = time.Now()
				w.checkReplication(ctx, conn)
			}
		}
		// A lease not renewed (the renewal failed, or its row was busy)
		// must be stopped as its time runs out, not at the next beat.
		timer.Reset(max(min(next, w.leaseLeft()), 10*time.Millisecond))
	}
}

// leaseLeft is the least time any held lease can still be ours.
func (w *Worker) leaseLeft() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	least := w.cfg.LeaseTTL
	for _, e := range w.running {
		if !e.lost.Load() { // a lost run may linger (its activity ignoring its context)
			least = min(least, e.leaseLeft())
		}
	}
	return least
}

// beat renews every held lease once.
func (w *Worker) beat(ctx context.Context, conn **pgx.Conn) error {
	w.mu.Lock()
	held := make([]*execution, 0, len(w.running))
	for _, e := range w.running {
		held = append(held, e)
	}
	w.mu.Unlock()
	if w.abandoned.Load() {
		// Shutdown gave up on these runs: their leases run out, which ends
		// their writes' retries, and they are rescued elsewhere.
		for _, e := range held {
			if e.leaseLeft() <= 0 {
				e.lose("not renewed after Shutdown gave up handing the run back")
			}
		}
		return nil
	}
	// The try ends before the first of these leases can expire, by our own
	// clock, so that its run is stopped in time if the renewal fails. A
	// lease already past its TTL can no longer be ours.
	timeout := w.cfg.StatementTimeout
	leases := make([]store.Lease, 0, len(held))
	live := held[:0]
	for _, e := range held {
		left := e.leaseLeft()
		if left <= 0 && !e.ending.Load() {
			e.lose("lease not renewed within its TTL")
			continue
		}
		live = append(live, e)
		leases = append(leases, e.lease)
		timeout = min(timeout, max(left, 10*time.Millisecond))
	}
	held = live
	began := time.Now()
	var renewed map[store.Lease]store.LeaseState
	tctx, cancel := context.WithTimeout(ctx, timeout)
	var err error
	if *conn == nil {
		*conn, err = w.connect(tctx)
	}
	if err == nil && len(held) == 0 {
		// Nothing to renew: the beat keeps the registry row alone.
		if row := w.registryRow(0, false); row != nil {
			if err = w.store.Beat(tctx, *conn, *row); registryRefused(err) {
				w.registryFailed(err) // the server refused the row: no outage
				err = nil
			}
		}
		if err != nil {
			_ = (*conn).Close(context.WithoutCancel(ctx))
			*conn = nil
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			w.renewals.failed(err, "leases", 0)
			return err
		}
		if err == nil {
			w.renewals.ok()
		}
		return nil
	}
	if err == nil {
		row := w.registryRow(len(held), false)
		renewed, err = w.store.Renew(tctx, *conn, leases, w.cfg.LeaseTTL, row)
		if row != nil && registryRefused(err) {
			// The server refused the statement: the registry's part may be
			// the cause, and leases never wait for it.
			w.registryFailed(err)
			renewed, err = w.store.Renew(tctx, *conn, leases, w.cfg.LeaseTTL, nil)
		}
		if err != nil { // the connection may be broken: open a fresh one next time
			_ = (*conn).Close(context.WithoutCancel(ctx))
			*conn = nil
		}
	}
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		w.renewals.failed(err, "leases", len(leases))
		// Without a renewal the lease may expire: stop what can no
		// longer be ours. Durations on our own clock, never compared
		// with the database's.
		for _, e := range held {
			if e.leaseLeft() <= 0 {
				e.lose("lease not renewed within its TTL")
			}
		}
		return err
	}
	w.renewals.ok()
	for _, e := range held {
		st, ours := renewed[e.lease]
		switch {
		case st.Renewed:
			e.renewed(began)
			if st.CancelRequested {
				e.requestCancel()
			}
		case e.ending.Load():
			// Our own last write may have ended the lease; its
			// fenced result says whether the lease was lost.
		case ours:
			// Still ours, but its row was locked by a write in flight:
			// the next beat renews it, unless the TTL ran out meanwhile.
			if e.leaseLeft() <= 0 {
				e.lose("lease not renewed within its TTL")
			}
		default:
			e.lose("heartbeat found the lease taken or the run cancelled")
		}
	}
	return nil
}

func (w *Worker) workflowFor(name string) sdk.Definition {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.workflows[name]
}
