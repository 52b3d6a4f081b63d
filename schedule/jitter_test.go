package schedule_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tenurehq/tenure/schedule"
)

// Jitter is pinned: a change of its hash would move the start of every
// schedule, so it is a test failure, not a refactoring.
func TestJitter_Pinned(t *testing.T) {
	tick := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		nominal time.Time
		max     time.Duration
		want    time.Duration
	}{
		{"invoices", tick, 5 * time.Minute, 9112097041},
		{"reports", tick, 5 * time.Minute, 219060851150},
		{"invoices", tick.Add(24 * time.Hour), 5 * time.Minute, 109451064541},
		{"invoices", tick.Add(time.Nanosecond), 5 * time.Minute, 32953773466},
		{"", time.Time{}, time.Hour, 3325957098411},
	} {
		if got := schedule.Jitter(tc.name, tc.nominal, tc.max); got != tc.want {
			t.Errorf("Jitter(%q, %v, %v) = %d, want %d", tc.name, tc.nominal, tc.max, got, tc.want)
		}
	}
}

// The same name and tick give the same delay, whatever the location of the
// tick and however often it is asked for.
func TestJitter_Deterministic(t *testing.T) {
	tick := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	want := schedule.Jitter("invoices", tick, time.Hour)
	for _, zone := range []string{"America/New_York", "Europe/Berlin", "Asia/Kolkata"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if got := schedule.Jitter("invoices", tick.In(loc), time.Hour); got != want {
				t.Errorf("Jitter in %s = %v, want %v as in UTC", zone, got, want)
			}
		}
	}
}

// No delay without a positive max.
func TestJitter_NonPositiveMax(t *testing.T) {
	tick := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for _, max := range []time.Duration{0, -1, -time.Hour, math.MinInt64} {
		if got := schedule.Jitter("invoices", tick, max); got != 0 {
			t.Errorf("Jitter(max %v) = %v, want 0", max, got)
		}
	}
}

// Delays are in [0, max) and spread over it: across names that differ in
// one character, and across the ticks of one schedule.
func TestJitter_Range(t *testing.T) {
	tick := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for _, max := range []time.Duration{1, 2, time.Second, time.Hour, math.MaxInt64} {
		for i := range 2000 {
			d := schedule.Jitter(fmt.Sprintf("job-%d", i), tick.Add(time.Duration(i)*time.Minute), max)
			if d < 0 || d >= max {
				t.Fatalf("Jitter(max %v) = %v, out of [0, max)", max, d)
			}
		}
	}
	const n, max = 10000, time.Hour
	for name, delay := range map[string]func(i int) time.Duration{
		"names": func(i int) time.Duration { return schedule.Jitter(fmt.Sprintf("tenant-%d", i), tick, max) },
		"ticks": func(i int) time.Duration {
			return schedule.Jitter("tenant", tick.Add(time.Duration(i)*time.Second), max)
		},
	} {
		var buckets [10]int
		var sum time.Duration
		for i := range n {
			d := delay(i)
			buckets[d*10/max]++
			sum += d
		}
		for b, c := range buckets {
			if c < n/10*8/10 || c > n/10*12/10 {
				t.Errorf("%s: %d of %d delays in [%v, %v), want about %d", name, c, n, max*time.Duration(b)/10, max*time.Duration(b+1)/10, n/10)
			}
		}
		if mean := sum / n; mean < 27*time.Minute || mean > 33*time.Minute {
			t.Errorf("%s: mean delay %v, want about 30m", name, mean)
		}
	}
}
