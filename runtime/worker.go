package runtime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/internal/committer"
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
	// Throttled counts the steps a downstream's limit denied: each run was
	// parked (counted in Suspended too) without an attempt.
	Throttled int64
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

	// The worker's moving parts, which Worker wires and starts.
	pool     *runPool     // the runs it holds, and their goroutines
	claimer  *claimer     // claims runs into the pool, and applies the wakes
	leases   *leaseKeeper // renews the pool's leases
	registry *registry    // the worker's row in the workers table
	listener *listener    // LISTENs for runs, wakes and cancels

	mu        sync.Mutex
	workflows map[string]sdk.Definition
	names     []string // the workflows' names, sorted, from the start on
	schedules []*sdk.Schedule
	ticker    loop     // tickSchedules, between the start and the end of the drain
	retainer  loop     // retainHistory, the same
	ticks     *trouble // the schedules' passes' path to the database
	started   bool
	interrupt context.CancelCauseFunc // cancels every execution with errShutdown
	// overrides replaces activities' functions (package tenuretest); set
	// once, from the context of Run or Start, before any run is claimed.
	overrides override.Table
	policies  *policies // the activities' resolved policies
	flows     *flows    // the downstreams its activities call

	// stopClaim is closed, and draining set, when the worker stops taking
	// new runs: the claimer's, read by the executions.
	stopClaim <-chan struct{}
	draining  *atomic.Bool
	done      chan struct{} // closed when Run has returned

	completed, failed, cancelled, suspended, released, leasesLost, attempts, throttled atomic.Int64
	dbErrors                                                                           atomic.Int64

	replication atomic.Pointer[record.Replication] // as last read (Replication)

	// writes is the runs' writes' path to the database, retried with
	// backoff while it fails: Health reports it with the parts' paths.
	writes  *trouble
	waiting atomic.Int64 // runs whose write is being retried
	serving atomic.Bool  // between the start of Run and its return
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
	// The runs its gives wake are announced to it while its LISTEN hears
	// them (listener.delivering).
	st, err := store.New(pool, store.WithSchema(cfg.Schema), store.WithBuild(cfg.BuildID))
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:       cfg,
		store:     st,
		workflows: map[string]sdk.Definition{},
		done:      make(chan struct{}),
		policies:  &policies{defaults: cfg.Defaults},
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
	w.claimer = &claimer{
		cfg: &w.cfg, store: st, execution: w.newExecution,
		claims:  newTrouble("claim runs", troubleLogEvery, log, observe),
		wakes:   newTrouble("apply wakes", troubleLogEvery, log, observe),
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
	}
	w.stopClaim, w.draining = w.claimer.stopped, &w.claimer.draining
	w.pool = newRunPool(w.claimer.slotFreed)
	w.claimer.pool = w.pool
	w.registry = &registry{cfg: &w.cfg, store: st, id: uuid.New()}
	w.leases = &leaseKeeper{
		cfg: &w.cfg, store: st, pool: w.pool, registry: w.registry,
		connect: w.connect, checkReplication: w.checkReplication, checkStranded: w.checkStranded,
		renewals: newTrouble("renew leases", troubleLogEvery, log, observe),
	}
	w.writes = newTrouble("write runs", troubleLogEvery, log, observe)
	w.ticks = newTrouble("decide schedule ticks", troubleLogEvery, log, observe)
	w.flows = &flows{store: st, label: w.cfg.Label, log: log}
	w.claimer.flows = w.flows
	w.listener = &listener{cfg: &w.cfg, store: st, connect: w.connect, claims: w.claimer, pool: w.pool,
		backfills: make(chan struct{}, 1)}
	return w, nil
}

// DatabaseObserver is an optional interface of an Observer (the otel
// package implements it): it hears of every database error of a worker's
// claims ("claim runs"), lease renewals ("renew leases"), runs' writes
// ("write runs"), applications of wakes ("apply wakes": signals sent,
// cancels asked) and passes of its schedules' ticker ("decide schedule
// ticks"), each of which the worker retries.
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
	if w.leases.abandoned.Load() {
		return fmt.Errorf("tenure worker %s: Shutdown gave up handing runs back; their leases are no longer renewed: %w", w.cfg.Label, ErrNotRunning)
	}
	err := errors.Join(w.claimer.claims.state(), w.leases.renewals.state(), w.writes.state(), w.claimer.wakes.state(), w.replicationHealth())
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
		if cl, ok := d.(sdk.ConcurrencyLimited); ok {
			if _, _, ok := cl.ConcurrencyLimit(); ok {
				w.flows.watch(flow.WorkflowPrefix + d.Name()) // swept from the start: its waiters may outlive their holders
			}
		}
	}
	return nil
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	return Stats{
		Claimed: w.claimer.claimed.Load(), Completed: w.completed.Load(), Failed: w.failed.Load(), Cancelled: w.cancelled.Load(),
		Suspended: w.suspended.Load(), Released: w.released.Load(), LeasesLost: w.leasesLost.Load(), Throttled: w.throttled.Load(),
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
			w.claimer.stop()
			close(w.done)
		}
	}()
	if err := w.store.Check(ctx); err != nil {
		return nil, err
	}
	if err := w.declareSchedules(ctx); err != nil {
		return nil, err
	}
	w.overrides = override.From(ctx)
	// The heartbeat has its own connection, open before any run is claimed.
	hb, err := w.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("runtime: heartbeat connection: %w", err)
	}
	w.registry.start(ctx, hb, names)
	w.checkReplication(ctx, hb)
	w.checkStranded(ctx, hb)
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
		// The listener and the lease keeper outlive ctx: they serve the
		// drain, and stop after it.
		loops := context.WithoutCancel(ctx)
		w.listener.start(loops)
		w.leases.start(loops, hb)

		w.ticker = startLoop(ctx, w.tickSchedules)
		w.retainer = startLoop(ctx, w.retainHistory)
		w.claimer.start(ctx, base, names)
		w.claimer.wait()
		w.ticker.stop()
		w.retainer.stop()
		if ctx.Err() != nil {
			interrupt(errShutdown)
		}
		w.pool.stop() // the lease keeper keeps renewing leases while runs finish
		w.listener.stop()
		w.leases.stop()
		w.registry.stop(ctx)
	}, nil
}

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
	var pinned []string
	for n, d := range w.workflows {
		names = append(names, n)
		if p, ok := d.(sdk.PinnedToBuild); ok && p.PinnedToBuild() {
			pinned = append(pinned, n)
		}
	}
	sort.Strings(names)
	sort.Strings(pinned)
	w.store.Pin(pinned)
	w.names = names
	return names, nil
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
	w.claimer.stop()
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
	n := w.pool.count()
	w.leases.abandoned.Store(true) // no more renewals: the leases expire, and with them the writes' retries
	return fmt.Errorf("%w: %d runs not handed back in time (the database is slow or unreachable); each is rescued once its lease expires", cut, n)
}

// wakeAt wakes the claim loop d from now, when that is sooner than its next
// poll could be (claimer.wakeAt): a run suspended until then is claimed on
// time.
func (w *Worker) wakeAt(d time.Duration) { w.claimer.wakeAt(d) }

// connect opens a connection of the worker's own, outside the pool, with the
// pool's settings: the LISTEN and heartbeat connections never take a slot
// that runs need, and runs holding every slot cannot starve them. Each try
// gives up after StatementTimeout; a timed-out try is made again, up to
// connectTries.
func (w *Worker) connect(ctx context.Context) (*pgx.Conn, error) {
	// A server slow to accept (a loaded machine) gets three tries, each of
	// StatementTimeout; a refused connection or a bad password fails at once.
	var err error
	for try := 1; try <= connectTries; try++ {
		var c *pgx.Conn
		cctx, cancel := context.WithTimeout(ctx, w.cfg.StatementTimeout)
		c, err = pgx.ConnectConfig(cctx, w.store.Pool().Config().ConnConfig.Copy())
		cancel()
		if err == nil || ctx.Err() != nil || !(pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded)) {
			return c, err
		}
		if try < connectTries {
			w.cfg.Logger.Warn("tenure: the database did not accept a connection in time; trying again",
				"worker", w.cfg.Label, "try", try, "of", connectTries, "timeout", w.cfg.StatementTimeout, "error", err)
		}
	}
	return nil, err
}

// connectTries is how many times connect tries a server that does not
// answer within StatementTimeout.
const connectTries = 3

func (w *Worker) workflowFor(name string) sdk.Definition {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.workflows[name]
}
