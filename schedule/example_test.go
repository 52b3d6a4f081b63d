package schedule_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/schedule"
)

// A spec is parsed once with its zone; Next then gives its ticks one after
// the other, as times in that zone.
func ExampleParse() {
	s, err := schedule.Parse("0 9 * * MON-FRI", "Europe/Berlin")
	if err != nil {
		panic(err)
	}
	t := time.Date(2026, 7, 2, 12, 0, 0, 0, time.UTC) // a Thursday
	for range 3 {
		t = s.Next(t)
		fmt.Println(t)
	}
	// Output:
	// 2026-07-03 09:00:00 +0200 CEST
	// 2026-07-06 09:00:00 +0200 CEST
	// 2026-07-07 09:00:00 +0200 CEST
}

// On the nights the clocks change, every tick is one instant: 02:30 does
// not exist on 2026-03-08 in New York and fires at 03:30 EDT, and 01:30
// happens twice on 2026-11-01 and fires at its first occurrence, in EDT.
func ExampleSpec_Next_daylightSaving() {
	spring, _ := schedule.Parse("30 2 * * *", "America/New_York")
	fmt.Println(spring.Next(time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC)))
	fall, _ := schedule.Parse("30 1 * * *", "America/New_York")
	first := fall.Next(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	fmt.Println(first)
	fmt.Println(fall.Next(first))
	// Output:
	// 2026-03-08 03:30:00 -0400 EDT
	// 2026-11-01 01:30:00 -0400 EDT
	// 2026-11-02 01:30:00 -0500 EST
}

// The ticks of @every are multiples of the interval since the Unix epoch,
// whatever the zone and whenever the schedule was created.
func ExampleSpec_Every() {
	s, _ := schedule.Parse("@every 1m", "Asia/Kolkata")
	d, ok := s.Every()
	fmt.Println(d, ok)
	fmt.Println(s.Next(time.Date(2026, 1, 1, 10, 0, 30, 0, time.UTC)).UTC())
	// Output:
	// 1m0s true
	// 2026-01-01 10:01:00 +0000 UTC
}

// A bad spec is a *ParseError whose Reason names the field and what it
// allows.
func ExampleParseError() {
	_, err := schedule.Parse("0 24 * * *", "")
	var pe *schedule.ParseError
	if errors.As(err, &pe) {
		fmt.Println(pe.Reason)
	}
	fmt.Println(err)
	// Output:
	// field "hour": 24 is out of range 0-23
	// schedule: bad spec "0 24 * * *": field "hour": 24 is out of range 0-23
}

// Jitter spreads schedules that share a tick, here three @daily schedules
// at midnight, over the first five minutes. The delays depend only on the
// names and the tick, so every worker computes the same start times.
func ExampleJitter() {
	midnight := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range []string{"invoices", "reports", "cleanup"} {
		d := schedule.Jitter(name, midnight, 5*time.Minute)
		fmt.Println(name, d.Round(time.Millisecond), d == schedule.Jitter(name, midnight, 5*time.Minute))
	}
	// Output:
	// invoices 9.112s true
	// reports 3m39.061s true
	// cleanup 1m30.525s true
}
