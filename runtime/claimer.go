package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/internal/store"
)

// claimer takes the runs the worker executes, one claim statement for as
// many as it has free slots, and applies the wakes (store.ApplyWakes) with
// it: signals sent, cancels asked. It claims from start until stop.
type claimer struct {
	cfg   *Config
	store *store.Store
	pool  *runPool
	// execution makes the execution of a claimed run (Worker.newExecution).
	execution func(base context.Context, c store.Claimed, claimedAt time.Time) *execution
	// The claims' and the wakes' paths to the database, each retried with
	// backoff while it fails: Health reports them.
	claims, wakes *trouble
	claimed       atomic.Int64 // leases taken (Stats.Claimed)
	flows         *flows       // swept about once a second

	wake     chan struct{} // a slot freed or a run was announced
	stopped  chan struct{} // closed when the worker stops taking new runs
	draining atomic.Bool   // set with stopped
	stopOnce sync.Once
	done     chan struct{} // closed when the claim loop has returned (start)
	mu       sync.Mutex
	timers   map[int64]*time.Timer // wakeAt's, by wakeBucket of their time; stopped with the claimer (under mu)

	// hearing: the worker's LISTEN is known to hear the runs channel's
	// notices (listener.delivering). backlog: a claim may find runs the
	// last one left for lack of free slots. See slotFreed.
	hearing, backlog atomic.Bool

	// Wakes: wakesDue is set by a notice of one, by a LISTEN taking effect
	// and by wakes left busy; cancelsDue by a LISTEN taking effect, for the
	// held runs' cancels whose notices it missed. lastWakes is when the
	// claim loop last applied them, and busyWakes whether it left some busy
	// (its goroutine's alone): at least every wakeEvery, whatever the
	// notices.
	wakesDue, cancelsDue atomic.Bool
	lastWakes            time.Time
	busyWakes            bool

	// elsewhere is wakeSoon's timer (under mu), for the notices of runs
	// other workers' gives of capacity woke.
	elsewhere *time.Timer
}

// wokeElsewhere is how soon a worker claims after a notice of a run another
// worker's give woke ("woke:<label>", migration 29's _wake_for): that
// worker claims it at once; this claim is for what it does not take (no
// slot free, a workflow or queue it does not serve, it stopped). One
// claim per wokeElsewhere, whatever the notices: under a limit that binds,
// four workers answered every release with four claims, three of them
// empty. (The worker named does not tell the others when it does not take
// the run: its slot is often freed, and the run claimed by the claim that
// sets off, just before or after its notice, and telling them then made
// the same empty claims.)
const wokeElsewhere = 50 * time.Millisecond

// wakeSoon wakes the claim loop wokeElsewhere from now, unless a wakeSoon
// is pending already.
func (c *claimer) wakeSoon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining.Load() || c.elsewhere != nil {
		return
	}
	c.elsewhere = time.AfterFunc(wokeElsewhere, func() {
		c.mu.Lock()
		c.elsewhere = nil
		c.mu.Unlock()
		c.signal()
	})
}

// start claims in a goroutine of its own (run) until stop, or until ctx
// ends; wait returns once it has.
func (c *claimer) start(ctx, base context.Context, names []string) {
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		c.run(ctx, base, names)
	}()
}

// wait returns once the claim loop that start began has returned.
func (c *claimer) wait() { <-c.done }

// run claims runs of the workflows names while there are free slots, until
// stopped, or until ctx ends, which stops it; base is the runs' context.
// While claims fail it backs off, deaf to wake-ups: every finished run and
// every notice would otherwise retry at once.
func (c *claimer) run(ctx, base context.Context, names []string) {
	ticker := time.NewTicker(c.cfg.PollInterval)
	defer ticker.Stop()
	bo := newBackoff(max(c.cfg.PollInterval, 10*time.Millisecond), 30*time.Second)
	for {
		full, err := c.claimOnce(ctx, base, names)
		if err != nil {
			if !sleep(ctx, bo.delay(), c.stopped) {
				if ctx.Err() != nil {
					c.stop()
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
			c.stop()
			return
		case <-c.stopped:
			return
		case <-c.wake:
		case <-ticker.C:
		}
	}
}

// stop ends the claims, and the timers of wakeAt: the worker takes no new
// run. It may be called more than once.
func (c *claimer) stop() {
	c.stopOnce.Do(func() {
		c.draining.Store(true)
		close(c.stopped)
		c.mu.Lock()
		for _, t := range c.timers {
			t.Stop()
		}
		c.timers = nil
		if c.elsewhere != nil {
			c.elsewhere.Stop()
		}
		c.mu.Unlock()
	})
}

// signal wakes the claim loop without blocking.
func (c *claimer) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// slotFreed is called when a run's execution ends: its slot is free. It
// wakes the claim loop when a claim may find a run: the last claim filled
// every free slot, or was not made for want of one, or the worker does not
// hear the notices (a transaction pooler, PollOnly) and so knows nothing
// of what was started since. A worker whose last claim found fewer runs
// than it had room for, and which hears the notices, is woken by the
// notice of the next run instead: at idle, a claim after every run's end
// was one statement a run that found nothing (bench C).
func (c *claimer) slotFreed() {
	if c.backlog.Load() || !c.hearing.Load() {
		c.signal()
	}
}

// wakeAt wakes the claim loop d from now, when that is sooner than its next
// poll could be: a run it suspended until then (a receive's timeout, a
// sleep) is claimed on time rather than up to a PollInterval late. Later
// times are left to the poll; the timers stop with the claimer.
func (c *claimer) wakeAt(d time.Duration) { c.wakeWithin(d, c.cfg.PollInterval) }

// wakeWithin is wakeAt for times up to limit: a run a rate parked must be
// claimed at its turn, which a poll up to a PollInterval late loses (the
// rate does not keep a turn missed). Times within one wakeBucket share a
// timer, so that a backlog of parked runs costs at most one timer per
// bucket of the time ahead, whatever its size.
func (c *claimer) wakeWithin(d, limit time.Duration) {
	if d <= 0 || d > limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining.Load() {
		return
	}
	at := time.Now().Add(d)
	b := at.UnixNano()/int64(wakeBucket) + 1 // the bucket's end: never before the due time
	if c.timers[b] != nil {
		return
	}
	// Just after the bucket's end, by the database's clock too.
	t := time.AfterFunc(time.Until(time.Unix(0, b*int64(wakeBucket)))+time.Millisecond, func() {
		c.signal()
		c.mu.Lock()
		delete(c.timers, b)
		c.mu.Unlock()
	})
	if c.timers == nil {
		c.timers = map[int64]*time.Timer{}
	}
	c.timers[b] = t
}

// wakeBucket is how close the wake times that share a timer are: well
// within a rate's slack at 100 a second with a burst of 2 (10 ms).
const wakeBucket = 5 * time.Millisecond

// wakeEvery is how often a worker applies the wakes (store.ApplyWakes)
// when no notice tells it of one: what a lost notice can delay a signal's
// wake-up, or the record of a cancel.
const wakeEvery = time.Second

// claimOnce fills free slots, after applying the wakes when they are due
// (then even with no slot free); it reports whether it got as many runs as it
// asked for, or the claim's error.
func (c *claimer) claimOnce(ctx, base context.Context, names []string) (full bool, _ error) {
	if c.draining.Load() || ctx.Err() != nil {
		return false, nil
	}
	c.flows.sweep(ctx, c.cfg.Observer, c.cfg.StatementTimeout)
	cancels := c.cancelsDue.Swap(false)
	n, held := c.pool.holding(cancels)
	free := c.cfg.Concurrency - n
	wake := c.wakesDue.Swap(false) || cancels || time.Since(c.lastWakes) >= wakeEvery
	if free <= 0 {
		c.backlog.Store(true) // woken with no room: whatever woke it waits for a slot
		if !wake {
			return false, nil
		}
	}
	began := time.Now()
	cctx, cancel := context.WithTimeout(ctx, c.cfg.StatementTimeout)
	claimed, woken, wake, err := c.claim(ctx, cctx, wake, held, names, free, began)
	cancel()
	if err != nil {
		if wake { // not applied: the next try
			c.wakesDue.Store(true)
			c.cancelsDue.Store(c.cancelsDue.Load() || cancels)
		}
		if ctx.Err() != nil {
			return false, nil
		}
		// A claim whose outcome is unknown (the connection was lost during
		// its commit) may have taken runs: their leases expire unrenewed and
		// they are reclaimed, with no attempt lost.
		c.claims.failed(err)
		return false, err
	}
	c.claims.ok()
	if wake {
		c.lastWakes = began
		c.woken(woken)
	}
	full = free > 0 && len(claimed) == free
	if free > 0 {
		// Set before the runs start, so that the first to end sees it.
		c.backlog.Store(full)
	}
	for _, run := range claimed {
		c.claimed.Add(1)
		c.pool.start(run.ID, c.execution(base, run, began))
	}
	return full, nil
}

// claim takes up to free runs, in one statement with the wakes when wake is
// set (reading the cancels of the held runs). The server refusing the
// wakes' statements, the claim goes on alone: wake is then returned false,
// as it is when the wakes were not to be applied.
func (c *claimer) claim(ctx, cctx context.Context, wake bool, held []uuid.UUID, names []string, free int, began time.Time) (
	claimed []store.Claimed, woken store.Woken, _ bool, err error,
) {
	if !wake {
		claimed, err = c.store.Claim(cctx, names, c.cfg.Queues, free, c.cfg.Label, c.cfg.LeaseTTL)
		return claimed, woken, false, err
	}
	claimed, woken, err = c.store.ClaimWaking(cctx, held, names, c.cfg.Queues, max(free, 0), c.cfg.Label, c.cfg.LeaseTTL)
	if err == nil {
		c.wakes.ok()
		return claimed, woken, true, nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || ctx.Err() != nil {
		return claimed, woken, true, err
	}
	// The server refused the wakes' statements (a role without the grants
	// on wakes, say): claims must not wait for them. They are tried again
	// at the next poll, and said wrong in Health; the claim goes on alone.
	c.wakes.failed(err)
	c.lastWakes = began
	claimed, woken, err = nil, store.Woken{}, nil
	if free > 0 {
		claimed, err = c.store.Claim(cctx, names, c.cfg.Queues, free, c.cfg.Label, c.cfg.LeaseTTL)
	}
	return claimed, woken, false, err
}

// woken acts on what applying the wakes found: the held runs whose cancel
// was asked are cancelled (their notices were missed), and wakes whose
// rows were busy are tried again soon (a commit in flight ends in
// milliseconds), then, while they stay busy (a caller's open transaction),
// at each poll.
func (c *claimer) woken(woken store.Woken) {
	for _, id := range woken.Cancelled {
		if e := c.pool.get(id); e != nil {
			e.requestCancel()
		}
	}
	if woken.Applied >= store.WakesApplied {
		c.wakesDue.Store(true) // more may be waiting: at once
		c.signal()
	}
	if woken.Left > 0 && !c.busyWakes {
		c.wakesDue.Store(true)
		c.wakeAt(wakeRetry)
	}
	c.busyWakes = woken.Left > 0
}

// wakeRetry is how soon wakes left busy are tried again.
const wakeRetry = 20 * time.Millisecond
