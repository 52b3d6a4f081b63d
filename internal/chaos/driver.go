package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/chaos/fleet"
	"github.com/tenurehq/tenure/internal/chaos/invariant"
	"github.com/tenurehq/tenure/internal/chaos/workload"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// config is one chaos run's parameters.
type config struct {
	URL         string // database
	Schema      string // must exist or be creatable; Tenure's tables are migrated into it
	Binary      string // the worker program (fleet.Build)
	Runs        int
	Workers     int
	Concurrency int           // per worker
	Duration    time.Duration // the chaos window
	Settle      time.Duration // how long runs may take to end after the window
	Interval    time.Duration // mean time between two disruptions
	LeaseTTL    time.Duration
	Heartbeat   time.Duration
	Poll        time.Duration
	PoisonEvery int // one run in PoisonEvery has a poison step; 0: none
	Seed        uint64
	Progress    io.Writer // progress lines; nil: none
}

// summary is what a chaos run did and found.
type summary struct {
	cfg          config
	report       *invariant.Report
	elapsed      time.Duration
	chaosFor     time.Duration
	settleFor    time.Duration
	kills        int      // SIGKILLs sent
	freezes      int      // SIGSTOP/SIGCONT pairs
	poisonDeaths int      // workers that killed themselves
	crashes      []string // workers that exited any other way we did not cause: a bug
	started      int      // worker processes started, restarts included
	leaseLostLog int      // "lease lost" warnings logged by all workers
	fencedLog    int      // of which a write refused by fencing
	exitStats    runtime.Stats
	graceful     int // workers that printed their exit stats
	// evidence describes the runs the first violations name (evidence).
	evidence string
	// stops lists, per worker label, when its process was killed, frozen
	// or found dead, on the database's clock (invariant.FlowOptions).
	stops map[string][]time.Time
}

// slot is one place in the fleet: a worker, replaced when it dies.
type slot struct {
	w         *fleet.Worker
	gen       int
	frozen    bool
	thawAt    time.Time
	killed    bool      // we sent SIGKILL
	restartAt time.Time // zero: running
}

// runChaos runs the workload on a fleet of worker processes while killing and
// freezing them, lets every run end, stops the fleet and checks the invariants.
func runChaos(ctx context.Context, cfg config) (*summary, error) {
	began := time.Now()
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%6.1fs  "+format+"\n", append([]any{time.Since(began).Seconds()}, args...)...)
		}
	}
	pool, err := pgxpool.New(ctx, cfg.URL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool, store.WithSchema(cfg.Schema)); err != nil {
		return nil, err
	}
	if err := workload.Migrate(ctx, pool, cfg.Schema); err != nil {
		return nil, err
	}
	listener, err := invariant.Listen(pool, cfg.Schema)
	if err != nil {
		return nil, err
	}
	stopListener := sync.OnceValues(listener.Stop)
	defer stopListener()
	select {
	case <-listener.Ready():
	case <-time.After(30 * time.Second):
		return nil, errors.New("chaos: completion listener did not start")
	}

	f := fleet.Config{
		Binary: cfg.Binary, DatabaseURL: cfg.URL, Schema: cfg.Schema, Concurrency: cfg.Concurrency,
		LeaseTTL: cfg.LeaseTTL, Heartbeat: cfg.Heartbeat, Poll: cfg.Poll, Drain: time.Second,
	}
	var all []*fleet.Worker
	defer func() {
		for _, w := range all {
			w.Close()
		}
	}()
	sum := &summary{cfg: cfg}
	startSlot := func(i int, s *slot) error {
		s.gen++
		w, err := fleet.Start(f, fmt.Sprintf("chaos-%d-%d", i, s.gen))
		if err != nil {
			return err
		}
		all = append(all, w)
		sum.started++
		*s = slot{w: w, gen: s.gen}
		return nil
	}
	slots := make([]*slot, cfg.Workers)
	for i := range slots {
		slots[i] = &slot{}
		if err := startSlot(i, slots[i]); err != nil {
			return nil, err
		}
	}

	// Runs are submitted over the first 60% of the window, so that the
	// disruptions hit them at every stage.
	client, err := sdk.NewClient(pool, sdk.WithSchema(cfg.Schema))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	plan := workload.New(nil).Plan
	submitCtx, stopSubmit := context.WithCancel(ctx)
	var submitted sync.WaitGroup
	defer func() {
		stopSubmit()
		submitted.Wait()
	}()
	var submitErr error
	var nSubmitted int
	var subMu sync.Mutex
	submitted.Go(func() {
		rng := rand.New(rand.NewPCG(cfg.Seed, 1))
		every := time.Duration(float64(cfg.Duration) * 0.6 / float64(max(cfg.Runs, 1)))
		next := time.Now()
		// The signal of a run's Receive step is sent signalLag runs later,
		// so that some are pending when the run reaches Receive and some
		// find it waiting without a lease; the last ones are sent at once.
		var unsent []uuid.UUID
		for i := range cfg.Runs {
			if d := time.Until(next); d > 0 {
				select {
				case <-submitCtx.Done():
					return
				case <-time.After(d):
				}
			}
			next = next.Add(every)
			p := randomPlan(rng, cfg.PoisonEvery > 0 && i%cfg.PoisonEvery == cfg.PoisonEvery/2)
			var err error
			var r *sdk.Run[workload.Result]
			for try := 0; try < 50; try++ {
				if r, err = sdk.Start(submitCtx, client, plan, p); err == nil || submitCtx.Err() != nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err == nil {
				for _, s := range p.Steps {
					if s.Kind == workload.Receive {
						unsent = append(unsent, r.ID)
					}
				}
				for err == nil && (len(unsent) > signalLag || (i == cfg.Runs-1 && len(unsent) > 0)) {
					err = sendSignal(submitCtx, client, unsent[0])
					unsent = unsent[1:]
				}
			}
			subMu.Lock()
			if err != nil {
				submitErr = err
				subMu.Unlock()
				return
			}
			nSubmitted++
			subMu.Unlock()
		}
	})

	rng := rand.New(rand.NewPCG(cfg.Seed, 2))
	nextDisruption := time.Now().Add(jitter(rng, cfg.Interval))
	chaosUntil := time.Now().Add(cfg.Duration)
	var settleUntil time.Time
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lastReport := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		chaos := now.Before(chaosUntil)
		// Tend the fleet: thaw, notice deaths, restart.
		healthy := 0
		for i, s := range slots {
			select {
			case <-s.w.Done():
				if s.restartAt.IsZero() {
					sum.died(s)
					if !s.killed {
						sum.stopped(ctx, pool, s)
					}
					s.restartAt = now.Add(time.Duration(rng.Int64N(int64(500 * time.Millisecond))))
				}
				if !now.Before(s.restartAt) {
					if err := startSlot(i, s); err != nil {
						return nil, err
					}
				}
				continue
			default:
			}
			if s.frozen && (!chaos || !now.Before(s.thawAt)) {
				_ = s.w.Resume()
				s.frozen = false
			}
			if !s.frozen {
				healthy++
			}
		}
		if chaos && !now.Before(nextDisruption) && healthy > 1 {
			nextDisruption = now.Add(jitter(rng, cfg.Interval))
			var live []*slot
			for _, s := range slots {
				if !s.frozen && s.restartAt.IsZero() {
					live = append(live, s)
				}
			}
			if len(live) > 0 {
				s := live[rng.IntN(len(live))]
				if rng.IntN(2) == 0 {
					s.killed = true
					_ = s.w.Kill()
					sum.stopped(ctx, pool, s)
					sum.kills++
				} else {
					s.frozen = true
					s.thawAt = now.Add(time.Duration(float64(cfg.LeaseTTL) * (0.5 + 2.5*rng.Float64())))
					_ = s.w.Freeze()
					sum.stopped(ctx, pool, s)
					sum.freezes++
				}
			}
		}
		subMu.Lock()
		n, serr := nSubmitted, submitErr
		subMu.Unlock()
		if serr != nil {
			return nil, fmt.Errorf("chaos: start run: %w", serr)
		}
		var open int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{cfg.Schema}.Sanitize()+`.runs WHERE status IN ('queued', 'running')`).Scan(&open); err != nil {
			return nil, err
		}
		if now.Sub(lastReport) >= 5*time.Second {
			lastReport = now
			progress("submitted %d/%d, open %d, kills %d, freezes %d, poison deaths %d", n, cfg.Runs, open, sum.kills, sum.freezes, sum.poisonDeaths)
		}
		if n == cfg.Runs && open == 0 {
			break
		}
		if !chaos {
			if settleUntil.IsZero() {
				sum.chaosFor = time.Since(began)
				settleUntil = now.Add(cfg.Settle)
				progress("chaos window over: %d runs still open", open)
			}
			if now.After(settleUntil) {
				progress("settle time over with %d runs open", open)
				break
			}
		}
	}
	if sum.chaosFor == 0 {
		sum.chaosFor = time.Since(began)
	}
	sum.settleFor = time.Since(began) - sum.chaosFor
	stopSubmit()
	submitted.Wait()

	// Stop the fleet gracefully and collect what the workers say. A worker
	// that died since the last tick is judged as the loop would have; one
	// just restarted gets to install its signal handlers first.
	var live []*slot
	for _, s := range slots {
		select {
		case <-s.w.Done():
			if s.restartAt.IsZero() {
				sum.died(s)
				if !s.killed {
					sum.stopped(ctx, pool, s)
				}
			}
			continue
		case <-s.w.Started():
		case <-time.After(15 * time.Second):
		}
		if s.frozen {
			_ = s.w.Resume()
		}
		_ = s.w.Terminate()
		live = append(live, s)
	}
	for _, s := range live {
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := s.w.Wait(wctx)
		cancel()
		switch {
		case err == nil && s.w.KilledBy(syscall.SIGKILL):
			// Only SIGTERM was sent here: this is its own poison pill, in
			// an attempt it started before the SIGTERM and ran while
			// draining (CI saw it once, counted as a crash).
			sum.poisonDeaths++
		case err != nil || s.w.ExitCode() != 0:
			sum.crashes = append(sum.crashes, crash(s.w))
		}
	}
	for _, w := range all {
		w.Close()
		sum.leaseLostLog += w.Count("tenure: lease lost")
		sum.fencedLog += w.Count("rejected by fencing")
		if st, ok := w.ExitStats(); ok {
			sum.graceful++
			sum.exitStats = addStats(sum.exitStats, st)
		}
	}
	sum.elapsed = time.Since(began)

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = listener.CatchUp(cctx, pool, cfg.Schema) // a notice still missing is reported below
	cancel()
	notices, complete := stopListener()
	rep, err := invariant.Check(ctx, pool, cfg.Schema, invariant.Options{Notices: notices, NoticesComplete: complete,
		Flow: &invariant.FlowOptions{Calls: workload.Calls(), Invocations: workload.LedgerTable, Stopped: sum.stops}})
	if err != nil {
		return nil, err
	}
	sum.report = rep
	if !rep.OK() {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		sum.evidence = evidence(ectx, pool, cfg.Schema, rep.Violations, all)
		cancel()
	}
	return sum, nil
}

// stopped records that the worker of s stopped running just now (killed,
// frozen or found dead), on the database's clock when it answers: a lost
// attempt of that worker made its call until then at the latest.
func (sum *summary) stopped(ctx context.Context, pool *pgxpool.Pool, s *slot) {
	at := time.Now()
	_ = pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at)
	if sum.stops == nil {
		sum.stops = map[string][]time.Time{}
	}
	sum.stops[s.w.Label] = append(sum.stops[s.w.Label], at)
}

// died records how the worker of a slot ended, when the driver notices it
// has: killed by us, by its own poison pill, or a crash.
func (sum *summary) died(s *slot) {
	switch {
	case s.killed:
	case s.w.KilledBy(syscall.SIGKILL):
		sum.poisonDeaths++
	default:
		sum.crashes = append(sum.crashes, crash(s.w))
	}
}

// crash describes a worker that ended badly, with the end of its log.
func crash(w *fleet.Worker) string {
	log := w.Log()
	if len(log) > 5 {
		log = log[len(log)-5:]
	}
	end := fmt.Sprintf("exit code %d", w.ExitCode())
	if sig, ok := w.Signal(); ok {
		end = "killed by " + sig.String()
	}
	return fmt.Sprintf("worker %s (pid %d) %s:\n  %s", w.Label, w.PID(), end, strings.Join(log, "\n  "))
}

// ok reports whether the run found nothing wrong: every invariant held and
// no worker crashed.
func (s *summary) ok() bool { return s.report.OK() && len(s.crashes) == 0 }

// jitter is a random duration around mean (uniform in [mean/2, 3*mean/2]).
func jitter(rng *rand.Rand, mean time.Duration) time.Duration {
	return mean/2 + time.Duration(rng.Int64N(int64(mean)+1))
}

// limitKeys are the keys of the runs' Limited steps under the downstream's
// limits: two, so that the limits hold per key.
var limitKeys = []string{"tenant-a", "tenant-b"}

// signalName is the signal the Receive steps of the chaos runs wait for.
const signalName = "chaos"

// signalLag is how many runs later a run's signal is sent.
const signalLag = 3

// sendSignal sends a run its signal, with the run's ID as payload. A run
// that has ended (it failed before its Receive step) needs none. A retried
// send whose first try committed leaves one more signal pending: harmless,
// the run consumes one per Receive step.
func sendSignal(ctx context.Context, client *sdk.Client, id uuid.UUID) error {
	var err error
	for try := 0; try < 50; try++ {
		err = client.Send(ctx, id, signalName, id.String())
		if err == nil || errors.Is(err, sdk.ErrFinished) {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("send signal to run %s: %w", id, err)
}

// randomPlan draws a run's plan: 2 to 4 steps mixing the kinds, a quarter of
// the activities with a long first attempt (likely in flight at a
// disruption), short durable sleeps (slept in process, the lease held), at
// most one Receive step (its signal sent by the submitter), and a poison
// step when asked; its Limited steps on one of limitKeys.
func randomPlan(rng *rand.Rand, poison bool) workload.Plan {
	var p workload.Plan
	receives := false
	for range 2 + rng.IntN(3) {
		s := workload.Step{SleepMS: 20 + rng.IntN(200)}
		if rng.IntN(4) == 0 {
			s.FirstSleepMS = 500 + rng.IntN(1500)
		}
		switch x := rng.IntN(100); {
		case x < 15:
			s.Kind = workload.AtLeastOnce
		case x < 30:
			// Held to the downstream's limits, sometimes failing first
			// (retries are charged to its retry budget).
			s.Kind = workload.Limited
			if rng.IntN(4) == 0 {
				s.Failures = 1 + rng.IntN(2)
			}
		case x < 48:
			s.Kind = workload.AtMostOnce
			s.Reconcile = rng.IntN(2) == 0
		case x < 66:
			s.Kind = workload.Transactional
		case x < 86:
			s.Kind = workload.Flaky
			s.Failures = rng.IntN(3)
			if rng.IntN(20) == 0 {
				s.Failures = 3 // over the default budget: retries_exhausted
			}
		case x < 94 || receives:
			s = workload.Step{Kind: workload.Sleep, SleepMS: 50 + rng.IntN(450)}
		default:
			s = workload.Step{Kind: workload.Receive, Signal: signalName}
			receives = true
		}
		p.Steps = append(p.Steps, s)
	}
	p.Key = limitKeys[rng.IntN(len(limitKeys))]
	if poison {
		at := rng.IntN(len(p.Steps) + 1)
		p.Steps = append(p.Steps[:at], append([]workload.Step{{Kind: workload.Poison}}, p.Steps[at:]...)...)
	}
	return p
}

func addStats(a, b runtime.Stats) runtime.Stats {
	return runtime.Stats{
		Claimed: a.Claimed + b.Claimed, Completed: a.Completed + b.Completed, Failed: a.Failed + b.Failed,
		Suspended: a.Suspended + b.Suspended, Released: a.Released + b.Released,
		LeasesLost: a.LeasesLost + b.LeasesLost, Attempts: a.Attempts + b.Attempts,
	}
}

// write prints the summary: parameters, disruptions, then the invariant report.
func (s *summary) write(w io.Writer) {
	c := s.cfg
	fmt.Fprintf(w, "tenure chaos: %d runs, %d workers x %d, lease %s, heartbeat %s, disruption every ~%s, poison 1/%d, seed %d\n",
		c.Runs, c.Workers, c.Concurrency, c.LeaseTTL, c.Heartbeat, c.Interval, c.PoisonEvery, c.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "elapsed\t%s\tchaos %s, settle %s, %.1f runs/s\n", s.elapsed.Round(100*time.Millisecond),
		s.chaosFor.Round(100*time.Millisecond), s.settleFor.Round(100*time.Millisecond), float64(s.report.Runs)/s.elapsed.Seconds())
	fmt.Fprintf(tw, "disruptions\t%d\tSIGKILL %d, SIGSTOP/SIGCONT %d, poison-pill self-kills %d\n", s.kills+s.freezes+s.poisonDeaths, s.kills, s.freezes, s.poisonDeaths)
	fmt.Fprintf(tw, "worker processes\t%d\tstarted (restarts included); %d stopped gracefully at the end\n", s.started, s.graceful)
	fmt.Fprintf(tw, "lost leases logged\t%d\tof which a write refused by fencing: %d\n", s.leaseLostLog, s.fencedLog)
	fmt.Fprintf(tw, "worker crashes\t%d\texits not caused by a signal of ours or a poison pill\n", len(s.crashes))
	_ = tw.Flush()
	fmt.Fprintln(w)
	s.report.Write(w)
	for _, c := range s.crashes {
		fmt.Fprintln(w, "CRASH", c)
	}
	fmt.Fprint(w, s.evidence)
	if s.ok() {
		fmt.Fprintln(w, "RESULT: all invariants hold")
	} else {
		fmt.Fprintf(w, "RESULT: %d violations, %d worker crashes\n", len(s.report.Violations), len(s.crashes))
	}
}

// String is the summary as text.
func (s *summary) String() string {
	var b strings.Builder
	s.write(&b)
	return b.String()
}
