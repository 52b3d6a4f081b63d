package schedule_test

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The nights of 2026 when the clocks change:
//
//	America/New_York  spring 2026-03-08 07:00Z: 02:00 EST -> 03:00 EDT
//	                  fall   2026-11-01 06:00Z: 02:00 EDT -> 01:00 EST
//	Europe/Berlin     spring 2026-03-29 01:00Z: 02:00 CET -> 03:00 CEST
//	                  fall   2026-10-25 01:00Z: 03:00 CEST -> 02:00 CET

// The whole sequence of ticks across each transition, compared with the
// expected instants in UTC (and the local time Next reports).
func TestNext_DSTNights(t *testing.T) {
	for _, tc := range []struct {
		name, spec, zone string
		from, to         string // ticks in (from, to]
		want             []string
	}{
		{
			name: "New York spring, quarter hours", spec: "*/15 * * * *", zone: "America/New_York",
			from: "2026-03-08T05:30:00Z", to: "2026-03-08T08:00:00Z",
			want: []string{
				"05:45Z (00:45 EST)", "06:00Z (01:00 EST)", "06:15Z (01:15 EST)", "06:30Z (01:30 EST)", "06:45Z (01:45 EST)",
				// 02:00 moves to 03:00, which matches itself: one tick; and
				// so on for 02:15, 02:30 and 02:45.
				"07:00Z (03:00 EDT)", "07:15Z (03:15 EDT)", "07:30Z (03:30 EDT)", "07:45Z (03:45 EDT)",
				"08:00Z (04:00 EDT)",
			},
		},
		{
			name: "New York fall, half hours", spec: "*/30 * * * *", zone: "America/New_York",
			from: "2026-11-01T04:00:00Z", to: "2026-11-01T08:00:00Z",
			want: []string{
				"04:30Z (00:30 EDT)", "05:00Z (01:00 EDT)", "05:30Z (01:30 EDT)",
				// 01:00 EST and 01:30 EST repeat: no tick.
				"07:00Z (02:00 EST)", "07:30Z (02:30 EST)", "08:00Z (03:00 EST)",
			},
		},
		{
			name: "New York fall, quarter hours", spec: "*/15 * * * *", zone: "America/New_York",
			from: "2026-11-01T04:40:00Z", to: "2026-11-01T07:20:00Z",
			want: []string{
				"04:45Z (00:45 EDT)", "05:00Z (01:00 EDT)", "05:15Z (01:15 EDT)", "05:30Z (01:30 EDT)", "05:45Z (01:45 EDT)",
				"07:00Z (02:00 EST)", "07:15Z (02:15 EST)",
			},
		},
		{
			name: "Berlin spring, quarter hours", spec: "*/15 * * * *", zone: "Europe/Berlin",
			from: "2026-03-29T00:30:00Z", to: "2026-03-29T02:00:00Z",
			want: []string{
				"00:45Z (01:45 CET)",
				"01:00Z (03:00 CEST)", "01:15Z (03:15 CEST)", "01:30Z (03:30 CEST)", "01:45Z (03:45 CEST)",
				"02:00Z (04:00 CEST)",
			},
		},
		{
			name: "Berlin fall, half hours", spec: "*/30 * * * *", zone: "Europe/Berlin",
			from: "2026-10-24T23:00:00Z", to: "2026-10-25T03:00:00Z",
			want: []string{
				"23:30Z (01:30 CEST)", "00:00Z (02:00 CEST)", "00:30Z (02:30 CEST)",
				// 02:00 CET and 02:30 CET repeat: no tick.
				"02:00Z (03:00 CET)", "02:30Z (03:30 CET)", "03:00Z (04:00 CET)",
			},
		},
		{
			name: "New York spring, every minute of the gap's edges", spec: "58-59,0-1 * * * *", zone: "America/New_York",
			from: "2026-03-08T06:50:00Z", to: "2026-03-08T08:05:00Z",
			want: []string{
				"06:58Z (01:58 EST)", "06:59Z (01:59 EST)",
				"07:00Z (03:00 EDT)", "07:01Z (03:01 EDT)", // 02:00 and 02:01 moved, 03:00 and 03:01 themselves
				"07:58Z (03:58 EDT)", "07:59Z (03:59 EDT)", // 02:58 and 02:59 moved, and 03:58 and 03:59 themselves
				"08:00Z (04:00 EDT)", "08:01Z (04:01 EDT)",
			},
		},
		{
			name: "New York spring, in the gap only", spec: "10,50 2 * * *", zone: "America/New_York",
			from: "2026-03-08T05:00:00Z", to: "2026-03-08T09:00:00Z",
			want: []string{"07:10Z (03:10 EDT)", "07:50Z (03:50 EDT)"},
		},
		{
			name: "Berlin fall, seconds of the repeated hour", spec: "0,30 59 2 * * *", zone: "Europe/Berlin",
			from: "2026-10-25T00:00:00Z", to: "2026-10-25T03:00:00Z",
			want: []string{"00:59Z (02:59 CEST)", "00:59:30Z (02:59:30 CEST)"},
		},
	} {
		s := mustParse(t, tc.spec, tc.zone)
		got := night(s, mustTime(t, tc.from), mustTime(t, tc.to))
		if !equal(got, tc.want) {
			t.Errorf("%s (%q):\n got %q\nwant %q", tc.name, tc.spec, got, tc.want)
		}
	}
}

// A daily spec at a time in the gap or the repeated hour fires once every
// day, including the day of the transition.
func TestNext_DSTDaily(t *testing.T) {
	for _, tc := range []struct {
		name, spec, zone, from string
		want                   []string // RFC 3339 in the zone
	}{
		{"New York spring, in the gap", "30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z",
			[]string{"2026-03-07T02:30:00-05:00", "2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"New York spring, gap's start", "0 2 * * *", "America/New_York", "2026-03-07T00:00:00Z",
			[]string{"2026-03-07T02:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		{"New York spring, gap's last second", "59 59 2 * * *", "America/New_York", "2026-03-07T00:00:00Z",
			[]string{"2026-03-07T02:59:59-05:00", "2026-03-08T03:59:59-04:00", "2026-03-09T02:59:59-04:00"}},
		{"New York fall, repeated", "30 1 * * *", "America/New_York", "2026-10-31T00:00:00Z",
			[]string{"2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"New York fall, after", "0 2 * * *", "America/New_York", "2026-10-31T00:00:00Z",
			[]string{"2026-10-31T02:00:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-02T02:00:00-05:00"}},
		{"Berlin spring, in the gap", "30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z",
			[]string{"2026-03-28T02:30:00+01:00", "2026-03-29T03:30:00+02:00", "2026-03-30T02:30:00+02:00"}},
		{"Berlin fall, repeated", "30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z",
			[]string{"2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"}},
		{"Berlin fall, after", "0 3 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z",
			[]string{"2026-10-24T03:00:00+02:00", "2026-10-25T03:00:00+01:00", "2026-10-26T03:00:00+01:00"}},
	} {
		s := mustParse(t, tc.spec, tc.zone)
		var got []string
		for at := mustTime(t, tc.from); len(got) < len(tc.want); {
			at = s.Next(at)
			got = append(got, at.Format(time.RFC3339))
		}
		if !equal(got, tc.want) {
			t.Errorf("%s (%q):\n got %q\nwant %q", tc.name, tc.spec, got, tc.want)
		}
	}
}

// An hourly spec fires 23 times on the spring day and 24 on the fall day,
// an hour apart but for the documented hole: none is repeated, and the
// only hour with no tick is 02:00 EST/CET to 03:00 on the spring day
// (there is no such hour) and the second pass of the repeated hour.
func TestNext_DSTHourly(t *testing.T) {
	for _, tc := range []struct {
		zone, day string
		want      int
		hole      string // the instant after which the next tick is 2h away
	}{
		{"America/New_York", "2026-03-08", 23, ""},
		{"America/New_York", "2026-11-01", 24, "2026-11-01T05:00:00Z"},
		{"Europe/Berlin", "2026-03-29", 23, ""},
		{"Europe/Berlin", "2026-10-25", 24, "2026-10-25T00:00:00Z"},
	} {
		s := mustParse(t, "0 * * * *", tc.zone)
		loc, _ := time.LoadLocation(tc.zone)
		day, _ := time.ParseInLocation("2006-01-02", tc.day, loc) // midnight exists on these days
		next := day.AddDate(0, 0, 1)
		var got []time.Time
		for at := s.Next(day.Add(-time.Second)); at.Before(next); at = s.Next(at) {
			got = append(got, at)
		}
		if len(got) != tc.want {
			t.Errorf("%s %s: %d ticks, want %d: %v", tc.zone, tc.day, len(got), tc.want, got)
			continue
		}
		if !got[0].Equal(day) {
			t.Errorf("%s %s: first tick %v, want midnight", tc.zone, tc.day, got[0])
		}
		seen := map[string]bool{}
		for i, at := range got {
			wall := at.Format("15:04")
			if seen[wall] {
				t.Errorf("%s %s: %s fires twice", tc.zone, tc.day, wall)
			}
			seen[wall] = true
			if i == 0 {
				continue
			}
			gap := at.Sub(got[i-1])
			want := time.Hour
			if tc.hole != "" && got[i-1].Equal(mustTime(t, tc.hole)) {
				want = 2 * time.Hour
			}
			if gap != want {
				t.Errorf("%s %s: %v after %v, want %v", tc.zone, tc.day, gap, got[i-1].UTC(), want)
			}
		}
		if tc.want == 23 && seen["02:00"] {
			t.Errorf("%s %s: a tick at 02:00, which does not exist", tc.zone, tc.day)
		}
	}
}

// Next from an instant inside the transition: just after the gap (where the
// moved times of the gap fire), and in the second pass of the repeated hour
// (where nothing repeated fires again).
func TestNext_FromInsideTransition(t *testing.T) {
	for _, tc := range []struct {
		spec, zone, from, want string
	}{
		// New York spring: 07:00Z is 03:00 EDT, the moved 02:00.
		{"30 2 * * *", "America/New_York", "2026-03-08T07:10:00Z", "2026-03-08T07:30:00Z"},
		{"30 2 * * *", "America/New_York", "2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"},
		{"10 2 * * *", "America/New_York", "2026-03-08T07:09:59.5Z", "2026-03-08T07:10:00Z"},
		{"10 2 * * *", "America/New_York", "2026-03-08T07:10:00Z", "2026-03-09T06:10:00Z"},
		{"*/15 * * * *", "America/New_York", "2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z"},
		{"*/15 * * * *", "America/New_York", "2026-03-08T06:59:59.999Z", "2026-03-08T07:00:00Z"},
		{"0 * * * *", "America/New_York", "2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z"},
		{"0 * * * *", "America/New_York", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"},
		{"0 3 * * *", "America/New_York", "2026-03-08T06:59:00Z", "2026-03-08T07:00:00Z"},
		// New York fall: 06:00Z-07:00Z is the second pass, 01:00-02:00 EST.
		{"30 1 * * *", "America/New_York", "2026-11-01T06:10:00Z", "2026-11-02T06:30:00Z"},
		{"30 1 * * *", "America/New_York", "2026-11-01T05:29:59Z", "2026-11-01T05:30:00Z"},
		{"30 1 * * *", "America/New_York", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
		{"*/30 * * * *", "America/New_York", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"},
		{"*/30 * * * *", "America/New_York", "2026-11-01T06:45:00Z", "2026-11-01T07:00:00Z"},
		{"* * * * *", "America/New_York", "2026-11-01T06:10:00Z", "2026-11-01T07:00:00Z"},
		{"* * * * * *", "America/New_York", "2026-11-01T05:59:59Z", "2026-11-01T07:00:00Z"},
		{"* * * * * *", "America/New_York", "2026-11-01T05:59:58Z", "2026-11-01T05:59:59Z"},
		{"0 2 * * *", "America/New_York", "2026-11-01T06:30:00Z", "2026-11-01T07:00:00Z"},
		// Berlin spring: 01:00Z is 03:00 CEST, the moved 02:00.
		{"30 2 * * *", "Europe/Berlin", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z"},
		{"30 2 * * *", "Europe/Berlin", "2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"},
		{"45 3 * * *", "Europe/Berlin", "2026-03-29T01:30:00Z", "2026-03-29T01:45:00Z"},
		// Berlin fall: 01:00Z-02:00Z is the second pass, 02:00-03:00 CET.
		{"30 2 * * *", "Europe/Berlin", "2026-10-25T01:10:00Z", "2026-10-26T01:30:00Z"},
		{"*/30 * * * *", "Europe/Berlin", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"},
		{"0 3 * * *", "Europe/Berlin", "2026-10-25T01:59:59Z", "2026-10-25T02:00:00Z"},
	} {
		s := mustParse(t, tc.spec, tc.zone)
		if got := s.Next(mustTime(t, tc.from)).UTC().Format(time.RFC3339); got != tc.want {
			t.Errorf("%q in %s after %s = %s, want %s", tc.spec, tc.zone, tc.from, got, tc.want)
		}
	}
}

// The package does not rely on what time.Date does with a time in a gap,
// which differs: the same wall-clock time is moved back in New York and
// forward in Berlin by the Go versions this was written with. Next moves
// both forward, and is right from whatever time.Date returns.
func TestNext_GapDoesNotDependOnTimeDate(t *testing.T) {
	for _, tc := range []struct {
		zone     string
		day      [3]int
		want     string
		wantNext string // Next from time.Date's answer for 02:30
	}{
		{"America/New_York", [3]int{2026, 3, 8}, "2026-03-08T03:30:00-04:00", "2026-03-08T03:30:00-04:00"},
		{"Europe/Berlin", [3]int{2026, 3, 29}, "2026-03-29T03:30:00+02:00", "2026-03-30T02:30:00+02:00"},
	} {
		loc, err := time.LoadLocation(tc.zone)
		if err != nil {
			t.Fatal(err)
		}
		s := mustParse(t, "30 2 * * *", tc.zone)
		date := time.Date(tc.day[0], time.Month(tc.day[1]), tc.day[2], 2, 30, 0, 0, loc)
		t.Logf("%s: time.Date(02:30) = %s", tc.zone, date.Format(time.RFC3339))
		midnight := time.Date(tc.day[0], time.Month(tc.day[1]), tc.day[2], 0, 0, 0, 0, loc)
		if got := s.Next(midnight).Format(time.RFC3339); got != tc.want {
			t.Errorf("%s: Next(midnight) = %s, want %s", tc.zone, got, tc.want)
		}
		got := s.Next(date)
		if !got.After(date) {
			t.Errorf("%s: Next(%v) = %v, not after", tc.zone, date, got)
		}
		// time.Date gives 01:30 EST in New York (before the moved 02:30)
		// and 03:30 CEST in Berlin (the moved 02:30 itself).
		if date.Format("15:04") == "01:30" || date.Format("15:04") == "03:30" {
			if g := got.Format(time.RFC3339); g != tc.wantNext {
				t.Errorf("%s: Next(%v) = %s, want %s", tc.zone, date, g, tc.wantNext)
			}
		}
	}
}

// Over all of 2026, a quarter-hourly spec has one tick for each matching
// wall-clock time but the four of the spring gap (they move onto 03:00,
// 03:15, 03:30 and 03:45, which match already); an hourly spec loses one;
// a daily spec in the gap or in the repeated hour fires 365 times, and so
// does each minute of 02:00-02:59, moved or repeated. The ticks always
// increase.
func TestNext_DSTYearCounts(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want int
	}{
		{"*/15 * * * *", 365*96 - 4},
		{"0 * * * *", 365*24 - 1},
		{"30 2 * * *", 365},
		{"30 1 * * *", 365},
		{"0 0 * * *", 365},
		{"* 2 * * *", 365 * 60},
	} {
		for _, zone := range []string{"America/New_York", "Europe/Berlin"} {
			s := mustParse(t, tc.spec, zone)
			loc, _ := time.LoadLocation(zone)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, loc).Add(-time.Nanosecond)
			end := time.Date(2027, 1, 1, 0, 0, 0, 0, loc)
			n := 0
			for at := s.Next(start); at.Before(end); n++ {
				next := s.Next(at)
				if !next.After(at) {
					t.Fatalf("%q in %s: Next(%v) = %v", tc.spec, zone, at, next)
				}
				at = next
			}
			if n != tc.want {
				t.Errorf("%q in %s: %d ticks in 2026, want %d", tc.spec, zone, n, tc.want)
			}
		}
	}
}

// For random instants of 2026 and 2027, many near a transition, Next is
// after t, Next(Next(t)-1ns) is Next(t), and no instant between t and
// Next(t) has an earlier next tick.
func TestNext_Monotonic(t *testing.T) {
	specs := []string{"*/15 * * * *", "30 2 * * *", "30 1 * * *", "0 * * * *", "*/7 1-3 * * *",
		"15 30 2 * * SUN", "0 0 1 * MON", "0 0 29 2 *", "* * * * * *", "@every 90s", "@daily"}
	transitions := []string{
		"2026-03-08T07:00:00Z", "2026-11-01T06:00:00Z", "2027-03-14T07:00:00Z", "2027-11-07T06:00:00Z",
		"2026-03-29T01:00:00Z", "2026-10-25T01:00:00Z", "2027-03-28T01:00:00Z", "2027-10-31T01:00:00Z",
	}
	r := rand.New(rand.NewPCG(2026, 2027))
	lo := mustTime(t, "2026-01-01T00:00:00Z").UnixNano()
	hi := mustTime(t, "2028-01-01T00:00:00Z").UnixNano()
	for _, zone := range []string{"America/New_York", "Europe/Berlin"} {
		for _, spec := range specs {
			s := mustParse(t, spec, zone)
			for i := range 600 {
				var at time.Time
				if i%2 == 0 {
					at = time.Unix(0, lo+r.Int64N(hi-lo))
				} else {
					tr := mustTime(t, transitions[r.IntN(len(transitions))])
					at = tr.Add(time.Duration(r.Int64N(int64(6*time.Hour))) - 3*time.Hour)
					if r.IntN(3) == 0 {
						at = at.Truncate(time.Minute) // on a tick, often
					}
				}
				next := s.Next(at)
				if !next.After(at) {
					t.Fatalf("%q in %s: Next(%v) = %v, not after", spec, zone, at.UTC(), next.UTC())
				}
				if again := s.Next(next.Add(-time.Nanosecond)); !again.Equal(next) {
					t.Fatalf("%q in %s: Next(%v) = %v but Next(that-1ns) = %v", spec, zone, at.UTC(), next.UTC(), again.UTC())
				}
				between := at.Add(time.Duration(r.Int64N(int64(next.Sub(at)))))
				if got := s.Next(between); !got.Equal(next) {
					t.Fatalf("%q in %s: Next(%v) = %v but Next(%v) = %v", spec, zone, at.UTC(), next.UTC(), between.UTC(), got.UTC())
				}
				if next.Location().String() != zone {
					t.Fatalf("%q in %s: Next in %v", spec, zone, next.Location())
				}
			}
		}
	}
}
