package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/chaos/fleet"
)

// Three worker processes declare a one-second schedule and decide its
// ticks while they are SIGKILLed and restarted, one at a time and, now and
// then, all at once: every second from the first tick to the last is one
// row, decided once (started, or missed while every worker was down: catch
// up latest), every started tick one run of the tick's key, and every such
// run ends completed. The suite runs it for 20 seconds; the proof,
// for 10 minutes: TENURE_SCHEDULE_STORM=10m go test ./internal/chaos -run
// TestSchedules -timeout 20m.
func TestSchedules_ASIGKILLStormDecidesEachSecondOnce(t *testing.T) {
	e := newEnv(t)
	storm := 20 * time.Second
	if s := os.Getenv("TENURE_SCHEDULE_STORM"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("TENURE_SCHEDULE_STORM=%q: %v", s, err)
		}
		storm = d
	}
	withSchedule := func(c *fleet.Config) { c.Schedule = "@every 1s" }
	labels := []string{"tick-a", "tick-b", "tick-c"}
	workers := map[string]*fleet.Worker{}
	for _, l := range labels {
		workers[l] = e.worker(l, withSchedule)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	kill := func(l string) {
		if err := workers[l].Kill(); err != nil {
			t.Fatal(err)
		}
		<-workers[l].Done()
	}
	kills := 0
	for end := time.Now().Add(storm); time.Now().Before(end); {
		time.Sleep(time.Duration(300+rng.IntN(900)) * time.Millisecond)
		if rng.IntN(8) == 0 { // every worker down for a while: ticks missed, one caught up
			for _, l := range labels {
				kill(l)
				kills++
			}
			time.Sleep(time.Duration(1500+rng.IntN(1500)) * time.Millisecond)
			for _, l := range labels {
				workers[l] = e.worker(l, withSchedule)
			}
			continue
		}
		l := labels[rng.IntN(len(labels))]
		kill(l)
		kills++
		workers[l] = e.worker(l, withSchedule)
	}
	time.Sleep(2 * time.Second) // the last ticks, and the runs of the last kills rescued
	rows, seconds, decisions := assertEachSecondOnce(e, 15, fmt.Sprintf("after %d kills", kills))
	t.Logf("%d ticks over %d s, %s, after %d kills", rows, seconds, decisions, kills)
}

// assertEachSecondOnce asserts what the ticks of the one-second schedule
// chaos-schedule must be, whatever befell its workers (about says what, for
// the failure): one row a second from its first nominal tick to its last,
// at least minRows; every started tick one run of the tick's key; no run of
// a tick key that no started tick names; and every such run completed (it
// waits for them). It returns the rows, the seconds and the count of each
// decision.
func assertEachSecondOnce(e *env, minRows int, about string) (rows, seconds int, decisions string) {
	e.t.Helper()
	got := mustQuery[string](e, `SELECT count(*) || ' ' || coalesce((extract(epoch FROM max(nominal_at) - min(nominal_at)) + 1)::int, 0) FROM {schema}.schedule_ticks`)
	fmt.Sscan(got, &rows, &seconds)
	if rows != seconds || rows < minRows {
		e.t.Fatalf("%d tick rows over %d seconds %s: want one a second", rows, seconds, about)
	}
	if got := mustQuery[string](e, `SELECT count(*) FILTER (WHERE t.decision = 'started') || ' ' || count(DISTINCT t.run_id) || ' ' || count(r.id)
		FROM {schema}.schedule_ticks t LEFT JOIN {schema}.runs r ON r.id = t.run_id
		  AND r.run_key = 'schedule:chaos-schedule@' || to_char(t.nominal_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`); len(strings.Fields(got)) != 3 ||
		strings.Fields(got)[0] != strings.Fields(got)[1] || strings.Fields(got)[1] != strings.Fields(got)[2] {
		e.t.Fatalf("started ticks, their distinct runs, their runs of the tick's key: %s", got)
	}
	if !mustQuery[bool](e, `SELECT count(*) = (SELECT count(*) FROM {schema}.schedule_ticks WHERE decision = 'started')
		FROM {schema}.runs WHERE run_key LIKE 'schedule:%'`) {
		e.t.Fatal("runs of tick keys that no started tick names")
	}
	deadline := time.Now().Add(waitFor)
	for mustQuery[int](e, `SELECT count(*) FROM {schema}.runs WHERE run_key LIKE 'schedule:%' AND status <> 'completed'`) != 0 {
		if time.Now().After(deadline) {
			e.t.Fatalf("runs of ticks not completed: %s", mustQuery[string](e, `SELECT string_agg(status, ' ') FROM {schema}.runs WHERE run_key LIKE 'schedule:%' AND status <> 'completed'`))
		}
		time.Sleep(100 * time.Millisecond)
	}
	decisions = mustQuery[string](e, `SELECT string_agg(decision || ' ' || n, ', ' ORDER BY decision) FROM (SELECT decision, count(*) AS n FROM {schema}.schedule_ticks GROUP BY 1) x`)
	return rows, seconds, decisions
}

// One worker's clock an hour ahead, another's an hour behind, a third's
// right, each a worker process deciding the ticks of a one-second schedule
// (the skewed ones' time.Now patched: fleet.Config.ClockSkew): no extra tick
// and no missing one, since a tick is due by the database's clock alone. In
// phases: all three; the one ahead alone; the one behind alone; the one
// ahead, killed in the phase before, restarted and alone; all three again.
// A worker is alive throughout. Each start shows its skew in effect (its
// clock against the database's); the ticks decided while a worker is alone
// are certainly its own (decided_by, and every other worker dead), and it
// decides every tick due while it is alone, none early: one ahead deciding
// by its clock would decide each tick an hour early, one behind each an hour
// late, and either fails here (tried by hand with a store whose due-ness read
// time.Now: the one ahead, alone, decided no tick of its phase, every tick it
// decided being an hour early).
// Then the storm test's assertions: one row a second, one run per started
// tick, every run completed.
func TestSchedules_AWorkersClockOffByAnHourDecidesNoExtraAndNoMissingTick(t *testing.T) {
	e := newEnv(t)
	skews := map[string]time.Duration{"tick-ahead": time.Hour, "tick-behind": -time.Hour, "tick-right": 0}
	all := []string{"tick-ahead", "tick-behind", "tick-right"}
	phases := []struct {
		alive []string
		last  time.Duration
	}{
		// The phases alone are 6 s: on a loaded machine (a CI run with every
		// package's tests at once) a restarted worker's first ticks may be
		// decided past their grace, as missed; 3 s once left none started.
		{all, 3 * time.Second},
		{[]string{"tick-ahead"}, 6 * time.Second},
		{[]string{"tick-behind"}, 6 * time.Second},
		{[]string{"tick-ahead"}, 6 * time.Second}, // restarted: killed in the phase before
		{all, 3 * time.Second},
	}
	workers := map[string]*fleet.Worker{}
	dbNow := func() time.Time { return mustQuery[time.Time](e, `SELECT clock_timestamp()`) }
	var measured []string
	start := func(l string) {
		w := e.worker(l, func(c *fleet.Config) { c.Schedule = "@every 1s"; c.ClockSkew = skews[l] })
		// The worker's clock, read as it printed its started line, against
		// the database's, read just after: off by the skew, give or take
		// how long the line took to arrive.
		off := w.Clock().Sub(dbNow())
		if d := off - skews[l]; d < -5*time.Second || d > 5*time.Second {
			t.Fatalf("worker %s: its clock is off the database's by %s, want %s", l, off, skews[l])
		}
		measured = append(measured, fmt.Sprintf("%s %s", l, off.Round(time.Millisecond)))
		workers[l] = w
	}
	var alone []string
	for _, p := range phases {
		for _, l := range p.alive {
			if workers[l] == nil {
				start(l)
			}
		}
		for _, l := range all {
			if w := workers[l]; w != nil && !slices.Contains(p.alive, l) {
				if err := w.Kill(); err != nil {
					t.Fatal(err)
				}
				<-w.Done()
				workers[l] = nil
			}
		}
		from := dbNow()
		time.Sleep(p.last)
		to := dbNow()
		if len(p.alive) != 1 {
			continue
		}
		// Alone from from to to: every tick decided meanwhile is the
		// worker's (a pass of a dead worker that committed began before it
		// died), which the test relies on; and so is every tick due
		// meanwhile, but the last second's (a tick decided late, after the
		// phase, might be another's), which is the point: none left over
		// for the others to catch up, none decided ahead.
		solo := p.alive[0]
		if n := mustQuery[int](e, `SELECT count(*) FROM {schema}.schedule_ticks WHERE decided_at BETWEEN $1 AND $2 AND decided_by <> $3`, from, to, solo); n != 0 {
			t.Fatalf("%d ticks decided by another worker while %s was alone", n, solo)
		}
		c := mustQuery[[]int64](e, `SELECT ARRAY[count(*), count(*) FILTER (WHERE decided_by = $3), count(*) FILTER (WHERE decided_by = $3 AND decision = 'started')]
			FROM {schema}.schedule_ticks WHERE nominal_at BETWEEN $1 AND $2::timestamptz - interval '1 second'`, from, to, solo)
		if c[0] < 2 || c[1] != c[0] || c[2] == 0 {
			t.Fatalf("%s alone for %s: of %d ticks due, %d decided by it, %d of them started; want at least 2, all decided by it, some started",
				solo, to.Sub(from).Round(time.Millisecond), c[0], c[1], c[2])
		}
		alone = append(alone, fmt.Sprintf("%s %d/%d/%d", solo, c[0], c[1], c[2]))
	}
	time.Sleep(2 * time.Second) // the last ticks, and the runs of the kills rescued
	if n := mustQuery[int](e, `SELECT count(*) FROM {schema}.schedule_ticks WHERE nominal_at > decided_at OR nominal_at > now()`); n != 0 {
		t.Fatalf("%d ticks decided before their time", n)
	}
	rows, seconds, decisions := assertEachSecondOnce(e, 15, "with clocks an hour off")
	t.Logf("%d ticks over %d s, %s; decided by: %s; alone (due/decided by it/started): %s; clocks against the database's: %s",
		rows, seconds, decisions,
		mustQuery[string](e, `SELECT string_agg(decided_by || ' ' || n, ', ' ORDER BY decided_by) FROM (SELECT decided_by, count(*) AS n FROM {schema}.schedule_ticks GROUP BY 1) x`),
		strings.Join(alone, ", "), strings.Join(measured, ", "))
	e.check()
}

// Three worker processes decide a one-second schedule's ticks while
// PostgreSQL restarts, fast twice and then immediately (a crash, with
// synchronous commits), a few ticks apart: a pass that met a restart
// decided nothing and is retried, so every second from the first tick to
// the last is still one row (started, or missed while the server was down:
// catch up latest), every started tick one run of the tick's key, and every
// such run completes. The workers outlive the restarts, and the chaos
// invariants hold.
func TestPostgresRestart_SchedulesDecideEachSecondOnce(t *testing.T) {
	t.Parallel()
	cluster := crashableCluster(t)
	e := newEnvOn(t, cluster.URL(), "public")
	withSchedule := func(c *fleet.Config) { c.Schedule = "@every 1s" }
	var workers []*fleet.Worker
	for _, l := range []string{"tick-a", "tick-b", "tick-c"} {
		workers = append(workers, e.worker(l, withSchedule))
	}
	// Progress is ticks started after a moment of the database's clock,
	// read once the server is back: some pass reached it after the restart.
	progress := func(what string) {
		since := mustQuery[time.Time](e, `SELECT clock_timestamp()`)
		e.eventually(what, func() (bool, error) {
			n, err := query[int](e, `SELECT count(*) FROM {schema}.schedule_ticks WHERE decision = 'started' AND nominal_at > $1`, since)
			return n >= 3, err
		})
	}
	progress("ticks started")
	var took []string
	for i, restart := range []func() error{cluster.Restart, cluster.Restart, cluster.RestartImmediate} {
		began := time.Now()
		if err := restart(); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(began).Round(time.Millisecond).String())
		progress(fmt.Sprintf("ticks started after restart %d", i+1))
	}
	for _, w := range workers {
		if _, err := w.Stats(e.ctx); err != nil { // alive and answering after the restarts
			t.Fatalf("worker %s: %v", w.Label, err)
		}
	}
	// Paused, the schedule starts no run after its last one completes: the
	// invariants below want every run ended.
	if err := e.op.PauseSchedule(e.ctx, "chaos-schedule", "the test's end"); err != nil {
		t.Fatal(err)
	}
	rows, seconds, decisions := assertEachSecondOnce(e, 12, "after three restarts")
	for _, w := range workers {
		stopGracefully(t, w)
	}
	e.check()
	t.Logf("%d ticks over %d s, %s; restarts (fast, fast, immediate) took %s", rows, seconds, decisions, strings.Join(took, ", "))
}
