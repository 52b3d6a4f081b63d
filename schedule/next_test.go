package schedule_test

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/schedule"
)

func mustParse(tb testing.TB, spec, zone string) schedule.Spec {
	tb.Helper()
	s, err := schedule.Parse(spec, zone)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func mustTime(tb testing.TB, rfc3339 string) time.Time {
	tb.Helper()
	t, err := time.Parse(time.RFC3339Nano, rfc3339)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// ticks returns the first n ticks after from, as RFC 3339 UTC times.
func ticks(s schedule.Spec, from time.Time, n int) []string {
	var out []string
	for t := from; len(out) < n; {
		t = s.Next(t)
		if t.IsZero() {
			out = append(out, "none")
			break
		}
		out = append(out, t.UTC().Format(time.RFC3339Nano))
	}
	return out
}

// night returns the ticks in (from, to] as "UTC (local)", e.g.
// "05:30Z (01:30 EDT)", with seconds if they are not 0; the date is
// implied by the test.
func night(s schedule.Spec, from, to time.Time) []string {
	var out []string
	for t := s.Next(from); !t.IsZero() && !t.After(to); t = s.Next(t) {
		clock := "15:04"
		if t.Second() != 0 {
			clock = "15:04:05"
		}
		out = append(out, t.UTC().Format(clock+"Z")+" ("+t.Format(clock+" MST")+")")
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Each field form selects what the package documentation says, in UTC.
func TestNext_FieldSemantics(t *testing.T) {
	for _, tc := range []struct {
		spec, from string
		want       []string
	}{
		// Lists, ranges and steps.
		{"5,10-12,*/20 * * * *", "2026-01-01T00:00:00Z", []string{
			"2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z", "2026-01-01T00:11:00Z", "2026-01-01T00:12:00Z",
			"2026-01-01T00:20:00Z", "2026-01-01T00:40:00Z", "2026-01-01T01:00:00Z"}},
		{"10-40/15 * * * *", "2026-01-01T00:00:00Z", []string{
			"2026-01-01T00:10:00Z", "2026-01-01T00:25:00Z", "2026-01-01T00:40:00Z", "2026-01-01T01:10:00Z"}},
		{"50/5 * * * *", "2026-01-01T00:00:00Z", []string{
			"2026-01-01T00:50:00Z", "2026-01-01T00:55:00Z", "2026-01-01T01:50:00Z"}},
		{"0 */8 * * *", "2026-01-01T00:00:00Z", []string{
			"2026-01-01T08:00:00Z", "2026-01-01T16:00:00Z", "2026-01-02T00:00:00Z"}},
		{"0 22-23,1 * * *", "2026-01-01T00:00:00Z", []string{
			"2026-01-01T01:00:00Z", "2026-01-01T22:00:00Z", "2026-01-01T23:00:00Z", "2026-01-02T01:00:00Z"}},
		// Sunday is 0, 7 and SUN in any case; 2026-01-01 is a Thursday.
		{"0 0 * * 0", "2026-01-01T00:00:00Z", []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"0 0 * * 7", "2026-01-01T00:00:00Z", []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"0 0 * * sUn", "2026-01-01T00:00:00Z", []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"0 0 * * 5-7", "2026-01-01T00:00:00Z", []string{
			"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z", "2026-01-09T00:00:00Z"}},
		{"0 0 * * FRI-SUN", "2026-01-01T00:00:00Z", []string{ // SUN ending a range is 7
			"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z", "2026-01-09T00:00:00Z"}},
		{"0 0 * * 6-sun", "2026-01-01T00:00:00Z", []string{"2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z", "2026-01-10T00:00:00Z"}},
		{"0 0 * * SUN-SUN", "2026-01-01T00:00:00Z", []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"0 0 * * SUN-MON", "2026-01-01T00:00:00Z", []string{"2026-01-04T00:00:00Z", "2026-01-05T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"0 0 * * */2", "2026-01-01T00:00:00Z", []string{ // Sun, Tue, Thu, Sat
			"2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z", "2026-01-06T00:00:00Z", "2026-01-08T00:00:00Z"}},
		{"0 0 * * 6/7", "2026-01-01T00:00:00Z", []string{"2026-01-03T00:00:00Z", "2026-01-10T00:00:00Z"}},
		{"0 0 * * mon,WED", "2026-01-01T00:00:00Z", []string{"2026-01-05T00:00:00Z", "2026-01-07T00:00:00Z", "2026-01-12T00:00:00Z"}},
		// Day-of-month and day-of-week: either when both are restricted.
		{"0 0 13 * FRI", "2026-01-01T00:00:00Z", []string{
			"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z", "2026-01-13T00:00:00Z", "2026-01-16T00:00:00Z", "2026-01-23T00:00:00Z"}},
		{"0 0 */10 * MON", "2026-01-01T00:00:00Z", []string{
			"2026-01-05T00:00:00Z", "2026-01-11T00:00:00Z", "2026-01-12T00:00:00Z", "2026-01-19T00:00:00Z",
			"2026-01-21T00:00:00Z", "2026-01-26T00:00:00Z", "2026-01-31T00:00:00Z", "2026-02-01T00:00:00Z"}},
		{"0 0 13 * *", "2026-01-01T00:00:00Z", []string{"2026-01-13T00:00:00Z", "2026-02-13T00:00:00Z"}},
		{"0 0 13 * ?", "2026-01-01T00:00:00Z", []string{"2026-01-13T00:00:00Z", "2026-02-13T00:00:00Z"}},
		{"0 0 * * FRI", "2026-01-01T00:00:00Z", []string{"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z"}},
		{"0 0 ? * FRI", "2026-01-01T00:00:00Z", []string{"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z"}},
		{"0 0 13 2 FRI", "2026-01-01T00:00:00Z", []string{ // February's Fridays and the 13th
			"2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z", "2026-02-27T00:00:00Z", "2027-02-05T00:00:00Z"}},
		// Months.
		{"0 0 1 JAN,jul *", "2026-01-01T00:00:00Z", []string{"2026-07-01T00:00:00Z", "2027-01-01T00:00:00Z"}},
		{"0 0 1 oct-DEC *", "2026-01-01T00:00:00Z", []string{
			"2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", "2027-10-01T00:00:00Z"}},
		{"0 0 1 */4 *", "2026-01-01T00:00:00Z", []string{"2026-05-01T00:00:00Z", "2026-09-01T00:00:00Z", "2027-01-01T00:00:00Z"}},
		// The seconds field.
		{"*/20 * * * * *", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
		{"30 0 9 * * *", "2026-01-01T00:00:00Z", []string{"2026-01-01T09:00:30Z", "2026-01-02T09:00:30Z"}},
		{"0 * * * * *", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"}},
		{"* * * * * *", "2026-01-01T00:00:00.5Z", []string{"2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"}},
		{"59 59 23 31 12 *", "2026-01-01T00:00:00Z", []string{"2026-12-31T23:59:59Z", "2027-12-31T23:59:59Z"}},
		// Macros.
		{"@yearly", "2026-03-01T00:00:00Z", []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"@annually", "2026-03-01T00:00:00Z", []string{"2027-01-01T00:00:00Z"}},
		{"@monthly", "2026-03-01T00:00:00Z", []string{"2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z"}},
		{"@weekly", "2026-01-01T00:00:00Z", []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"@daily", "2026-03-01T12:00:00Z", []string{"2026-03-02T00:00:00Z", "2026-03-03T00:00:00Z"}},
		{"@midnight", "2026-03-01T12:00:00Z", []string{"2026-03-02T00:00:00Z"}},
		{"@hourly", "2026-03-01T12:00:00Z", []string{"2026-03-01T13:00:00Z", "2026-03-01T14:00:00Z"}},
		{"@DAILY", "2026-03-01T12:00:00Z", []string{"2026-03-02T00:00:00Z"}},
	} {
		s := mustParse(t, tc.spec, "")
		if got := ticks(s, mustTime(t, tc.from), len(tc.want)); !equal(got, tc.want) {
			t.Errorf("%q after %s:\n got %q\nwant %q", tc.spec, tc.from, got, tc.want)
		}
	}
}

// Next crosses month and year ends, finds leap days, and gives the zero
// Time for a date that never comes.
func TestNext_Calendar(t *testing.T) {
	for _, tc := range []struct {
		spec, from string
		want       []string
	}{
		{"0 0 31 * *", "2026-01-31T00:00:00Z", []string{
			"2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z", "2026-07-31T00:00:00Z", "2026-08-31T00:00:00Z",
			"2026-10-31T00:00:00Z", "2026-12-31T00:00:00Z", "2027-01-31T00:00:00Z"}},
		{"0 0 30 * *", "2026-01-30T00:00:00Z", []string{"2026-03-30T00:00:00Z", "2026-04-30T00:00:00Z"}},
		{"* * * * *", "2026-12-31T23:59:30Z", []string{"2027-01-01T00:00:00Z", "2027-01-01T00:01:00Z"}},
		{"59 23 31 12 *", "2026-12-31T23:59:00Z", []string{"2027-12-31T23:59:00Z"}},
		{"0 0 1 1 *", "2026-12-31T23:59:59.999999999Z", []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"0 12 28-31 2 *", "2027-01-01T00:00:00Z", []string{"2027-02-28T12:00:00Z", "2028-02-28T12:00:00Z", "2028-02-29T12:00:00Z", "2029-02-28T12:00:00Z"}},
		// Leap days, including the eight-year wait across 2100.
		{"0 0 29 2 *", "2026-01-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"0 0 29 2 *", "2028-02-29T00:00:00Z", []string{"2032-02-29T00:00:00Z"}},
		{"0 0 29 2 *", "2096-03-01T00:00:00Z", []string{"2104-02-29T00:00:00Z"}},
		{"0 0 29 2 *", "2399-01-01T00:00:00Z", []string{"2400-02-29T00:00:00Z"}},
		// Strictly after: a tick is not after itself.
		{"0 0 * * *", "2026-01-01T00:00:00Z", []string{"2026-01-02T00:00:00Z"}},
		{"0 0 * * *", "2025-12-31T23:59:59.999999999Z", []string{"2026-01-01T00:00:00Z"}},
		{"0 0 * * *", "2026-01-01T00:00:00.000000001Z", []string{"2026-01-02T00:00:00Z"}},
		// Dates that never come.
		{"0 0 30 2 *", "2026-01-01T00:00:00Z", []string{"none"}},
		{"0 0 31 4 *", "2026-01-01T00:00:00Z", []string{"none"}},
		{"0 0 31 2,4,6,9,11 *", "2026-01-01T00:00:00Z", []string{"none"}},
		{"0 0 30,31 FEB ?", "2026-01-01T00:00:00Z", []string{"none"}},
		// Far from 1970, in both directions.
		{"0 0 1 1 *", "1900-06-01T00:00:00Z", []string{"1901-01-01T00:00:00Z"}},
		{"0 0 1 1 *", "9000-06-01T00:00:00Z", []string{"9001-01-01T00:00:00Z"}},
	} {
		s := mustParse(t, tc.spec, "")
		if got := ticks(s, mustTime(t, tc.from), len(tc.want)); !equal(got, tc.want) {
			t.Errorf("%q after %s:\n got %q\nwant %q", tc.spec, tc.from, got, tc.want)
		}
	}
}

// The zero Spec has no ticks.
func TestNext_ZeroSpec(t *testing.T) {
	var s schedule.Spec
	if got := s.Next(mustTime(t, "2026-01-01T00:00:00Z")); !got.IsZero() {
		t.Errorf("zero Spec: Next = %v, want the zero Time", got)
	}
	if d, ok := s.Every(); d != 0 || ok {
		t.Errorf("zero Spec: Every() = %v, %v", d, ok)
	}
}

// The location of the argument does not matter; the result is in the
// spec's zone.
func TestNext_ArgumentLocation(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	for _, zone := range []string{"", "America/New_York", "Europe/Berlin"} {
		for _, spec := range []string{"30 2 * * *", "@every 1h"} {
			s := mustParse(t, spec, zone)
			from := mustTime(t, "2026-03-08T06:59:00Z")
			a, b := s.Next(from), s.Next(from.In(tokyo))
			if !a.Equal(b) {
				t.Errorf("%q in %q: Next differs with the argument's location: %v, %v", spec, zone, a, b)
			}
			if a.Location().String() != s.Zone() {
				t.Errorf("%q in %q: Next is in %v, want %v", spec, zone, a.Location(), s.Zone())
			}
		}
	}
}

// The ticks of @every are the multiples of the interval since the Unix
// epoch, whatever the zone.
func TestNext_Every(t *testing.T) {
	for _, tc := range []struct {
		spec, from string
		want       []string
	}{
		{"@every 1m", "2026-01-01T10:00:30Z", []string{"2026-01-01T10:01:00Z", "2026-01-01T10:02:00Z"}},
		{"@every 1m", "2026-01-01T10:01:00Z", []string{"2026-01-01T10:02:00Z"}},
		{"@every 1m", "2026-01-01T10:00:59.999999999Z", []string{"2026-01-01T10:01:00Z"}},
		// 2026-01-01T00:00:00Z is 1767225600s, a multiple of 90s.
		{"@every 90s", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:01:30Z", "2026-01-01T00:03:00Z", "2026-01-01T00:04:30Z"}},
		{"@every 90s", "2026-01-01T00:01:29Z", []string{"2026-01-01T00:01:30Z"}},
		// 2026-01-01T00:00:00Z is a multiple of 7h (25200s), so the next
		// day's midnight is 3h after one.
		{"@every 7h", "2026-01-01T00:00:00Z", []string{"2026-01-01T07:00:00Z", "2026-01-01T14:00:00Z"}},
		{"@every 7h", "2026-01-02T00:00:00Z", []string{"2026-01-02T04:00:00Z", "2026-01-02T11:00:00Z"}},
		{"@every 1.5s", "2026-01-01T00:00:00.2Z", []string{"2026-01-01T00:00:01.5Z", "2026-01-01T00:00:03Z"}},
		{"@every 24h", "2026-01-01T12:00:00Z", []string{"2026-01-02T00:00:00Z"}},
		// Before 1970.
		{"@every 1m", "1969-12-31T23:59:30Z", []string{"1970-01-01T00:00:00Z"}},
		{"@every 1m", "1969-12-31T23:58:59.5Z", []string{"1969-12-31T23:59:00Z"}},
	} {
		for _, zone := range []string{"", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "Australia/Lord_Howe"} {
			s := mustParse(t, tc.spec, zone)
			got := ticks(s, mustTime(t, tc.from), len(tc.want))
			if !equal(got, tc.want) {
				t.Errorf("%q in %q after %s:\n got %q\nwant %q", tc.spec, zone, tc.from, got, tc.want)
			}
		}
	}
}

// An hourly @every ignores daylight saving time: it fires every 3600s
// through both transitions.
func TestNext_EveryIgnoresDST(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Europe/Berlin"} {
		s := mustParse(t, "@every 1h", zone)
		from := mustTime(t, "2026-01-01T00:00:00Z")
		n := 0
		for t0 := from; t0.UTC().Year() < 2027; n++ {
			t1 := s.Next(t0)
			if t1.Sub(t0) != time.Hour {
				t.Fatalf("%s: %v then %v", zone, t0, t1)
			}
			t0 = t1
		}
		if n != 8760 {
			t.Errorf("%s: %d ticks in 2026, want 8760", zone, n)
		}
	}
}
