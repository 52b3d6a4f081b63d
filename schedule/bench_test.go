package schedule_test

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/schedule"
)

// Next walks a year of ticks (or tries to), so the cost per call includes
// the crossings of month, year and daylight saving boundaries.
func BenchmarkNext(b *testing.B) {
	for _, bc := range []struct{ name, spec, zone string }{
		{"quarter-hour-UTC", "*/15 * * * *", ""},
		{"quarter-hour-New_York", "*/15 * * * *", "America/New_York"},
		{"daily-in-gap-Berlin", "30 2 * * *", "Europe/Berlin"},
		{"weekdays-seconds", "30 0 9 * * MON-FRI", "America/New_York"},
		{"leap-day", "0 0 29 2 *", "Europe/Berlin"},
		{"never", "0 0 30 2 *", "America/New_York"},
		{"every-90s", "@every 90s", "America/New_York"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := mustParse(b, bc.spec, bc.zone)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			at := start
			for b.Loop() {
				at = s.Next(at)
				if at.IsZero() || at.Year() > 2030 {
					at = start
				}
			}
		})
	}
}

// Parse's cost is mostly loading the zone.
func BenchmarkParse(b *testing.B) {
	for b.Loop() {
		if _, err := schedule.Parse("0,30 9-17/2 * JAN-JUN MON-FRI", "America/New_York"); err != nil {
			b.Fatal(err)
		}
	}
}
