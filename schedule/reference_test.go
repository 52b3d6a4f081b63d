package schedule

import (
	"math/rand/v2"
	"testing"
	"time"
)

// refInstant returns the instant of the wall-clock time w (a time in UTC
// standing for the same clock reading in loc) by the package's rules,
// worked out from the offsets around it alone: the earlier of its
// occurrences, or, if it has none (a gap), w read with the offset before
// the gap. It assumes at most one transition within a day of w.
func refInstant(w time.Time, loc *time.Location) time.Time {
	_, before := w.Add(-26 * time.Hour).In(loc).Zone()
	_, after := w.Add(26 * time.Hour).In(loc).Zone()
	var best time.Time
	for _, off := range []int{before, after} {
		x := w.Add(-time.Duration(off) * time.Second)
		if _, o := x.In(loc).Zone(); o == off && (best.IsZero() || x.Before(best)) {
			best = x
		}
	}
	if best.IsZero() {
		best = w.Add(-time.Duration(before) * time.Second)
	}
	return best
}

// refMatches reports whether the spec's fields match the wall-clock time w,
// using the time package for the calendar.
func (s Spec) refMatches(w time.Time) bool {
	dom, dow := s.dom.has(w.Day()), s.dow.has(int(w.Weekday()))
	day := dom && dow
	if !s.domStar && !s.dowStar {
		day = dom || dow
	}
	return day && s.month.has(int(w.Month())) && s.hour.has(w.Hour()) &&
		s.minute.has(w.Minute()) && s.second.has(w.Second())
}

// refNext is Next by brute force, minute by minute over the wall-clock
// times from back before t's to ahead after it, for specs whose seconds
// field is 0.
func (s Spec) refNext(t time.Time, back, ahead time.Duration) (time.Time, bool) {
	_, off := t.In(s.loc).Zone()
	wall := time.Unix(t.Unix()+int64(off), 0).UTC().Truncate(time.Minute)
	var best time.Time
	for w := wall.Add(-back); w.Before(wall.Add(ahead)); w = w.Add(time.Minute) {
		if !s.refMatches(w) {
			continue
		}
		if i := refInstant(w, s.loc); i.After(t) && (best.IsZero() || i.Before(best)) {
			best = i
		}
	}
	return best, !best.IsZero()
}

// transitions returns the instants in [from, to) at which loc's offset
// changes.
func transitions(loc *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	for at := from; at.Before(to); {
		_, end := at.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			break
		}
		if _, o1 := end.Add(-time.Second).Zone(); true {
			if _, o2 := end.Zone(); o1 != o2 {
				out = append(out, end)
			}
		}
		at = end
	}
	return out
}

// Next agrees with a brute-force search that applies the daylight saving
// rules to each wall-clock time, near the transitions of zones with
// whole-hour, half-hour and midnight transitions, in both hemispheres.
func TestNext_AgreesWithBruteForce(t *testing.T) {
	specs := []string{"*/15 * * * *", "30 2 * * *", "0 * * * *", "30 1 * * *", "0 0 * * *",
		"*/7 0-3,23 * * *", "45 23 * * *", "15 1,2 * * *", "30 * * * *", "59 0-3 * * *"}
	zones := []string{"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/St_Johns",
		"America/Santiago", "Europe/Dublin", "Australia/Sydney", "America/Havana", "Asia/Kolkata", "UTC"}
	r := rand.New(rand.NewPCG(1, 2))
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, zone := range zones {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		trs := transitions(loc, from, to)
		if zone != "UTC" && zone != "Asia/Kolkata" && len(trs) < 4 {
			t.Fatalf("%s: %d transitions in 2026-2027, want at least 4", zone, len(trs))
		}
		for _, spec := range specs {
			s, err := Parse(spec, zone)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 40 {
				var at time.Time
				if len(trs) == 0 || i%4 == 0 {
					at = from.Add(time.Duration(r.Int64N(int64(to.Sub(from)))))
				} else {
					at = trs[r.IntN(len(trs))].Add(time.Duration(r.Int64N(int64(30*time.Hour))) - 15*time.Hour)
					if i%3 == 0 {
						at = at.Truncate(15 * time.Minute)
					}
				}
				want, ok := s.refNext(at, 3*time.Hour, 27*time.Hour)
				if !ok {
					t.Fatalf("%q in %s: no reference tick after %v", spec, zone, at)
				}
				if got := s.Next(at); !got.Equal(want) {
					t.Errorf("%q in %s: Next(%v) = %v, brute force says %v", spec, zone,
						at.In(loc).Format(time.RFC3339Nano), got.Format(time.RFC3339), want.In(loc).Format(time.RFC3339))
				}
			}
		}
	}
}

// Samoa skipped 2011-12-30 when it crossed the date line: a daily time of
// that day moves forward a whole day, onto the same time of 2011-12-31,
// and fires once.
func TestNext_SkippedDay(t *testing.T) {
	s, err := Parse("30 2 * * *", "Pacific/Apia")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2011, 12, 28, 12, 0, 0, 0, time.UTC)
	var got []string
	for range 3 {
		at = s.Next(at)
		got = append(got, at.Format(time.RFC3339))
		if want, _ := s.refNext(at.Add(-time.Second), 26*time.Hour, 50*time.Hour); !want.Equal(at) {
			t.Errorf("Next = %v, brute force says %v", at, want)
		}
	}
	want := []string{"2011-12-28T02:30:00-10:00", "2011-12-29T02:30:00-10:00", "2011-12-31T02:30:00+14:00"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ticks %q, want %q", got, want)
		}
	}
}

// The calendar arithmetic agrees with the time package, far from 1970 too.
func TestCivil(t *testing.T) {
	for days := int64(-800000); days <= 800000; days += 7 {
		want := time.Unix(days*86400, 0).UTC()
		y, m, d := civil(days)
		if y != want.Year() || m != int(want.Month()) || d != want.Day() {
			t.Fatalf("civil(%d) = %d-%d-%d, want %v", days, y, m, d, want)
		}
		if got := daysFromCivil(y, m, d); got != days {
			t.Fatalf("daysFromCivil(%d, %d, %d) = %d, want %d", y, m, d, got, days)
		}
		if got := weekday(days); got != int(want.Weekday()) {
			t.Fatalf("weekday(%d) = %d, want %d", days, got, want.Weekday())
		}
		if got, want := daysIn(y, m), time.Date(y, time.Month(m)+1, 0, 0, 0, 0, 0, time.UTC).Day(); got != want {
			t.Fatalf("daysIn(%d, %d) = %d, want %d", y, m, got, want)
		}
	}
}

func TestMaskNext(t *testing.T) {
	m := mask(1<<0 | 1<<5 | 1<<63)
	for _, tc := range []struct{ from, want int }{{0, 0}, {1, 5}, {5, 5}, {6, 63}, {63, 63}, {64, -1}, {100, -1}} {
		if got := m.next(tc.from); got != tc.want {
			t.Errorf("next(%d) = %d, want %d", tc.from, got, tc.want)
		}
	}
	if got := mask(0).next(0); got != -1 {
		t.Errorf("empty next(0) = %d, want -1", got)
	}
}
