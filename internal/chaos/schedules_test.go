package main

import (
	"fmt"
	"math/rand/v2"
	"os"
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
