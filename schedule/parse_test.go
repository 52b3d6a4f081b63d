package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/schedule"
)

// Every form of the syntax parses, and String, Zone and Every report what
// was given.
func TestParse_Valid(t *testing.T) {
	for _, tc := range []struct {
		spec, zone string
		wantZone   string
		every      time.Duration
	}{
		{spec: "* * * * *", wantZone: "UTC"},
		{spec: "*/15 * * * *", zone: "America/New_York", wantZone: "America/New_York"},
		{spec: "0 0 * * * *", zone: "UTC", wantZone: "UTC"},
		{spec: "0-59/5 0-23 1-31 1-12 0-7", wantZone: "UTC"},
		{spec: "5/10 * ? * ?", wantZone: "UTC"},
		{spec: "0 9 * jan-Mar,DEC mon-FRI", wantZone: "UTC"},
		{spec: "  1,2,3  4  5  6  7  ", wantZone: "UTC"},
		{spec: "59 59 23 31 12 7", wantZone: "UTC"},
		{spec: "@yearly", wantZone: "UTC"},
		{spec: "@ANNUALLY", wantZone: "UTC"},
		{spec: "@monthly", wantZone: "UTC"},
		{spec: "@weekly", wantZone: "UTC"},
		{spec: "@daily", zone: "Europe/Berlin", wantZone: "Europe/Berlin"},
		{spec: "@midnight", wantZone: "UTC"},
		{spec: "@hourly", wantZone: "UTC"},
		{spec: "@every 1s", wantZone: "UTC", every: time.Second},
		{spec: "@every 90s", zone: "Asia/Kolkata", wantZone: "Asia/Kolkata", every: 90 * time.Second},
		{spec: "@every 1.5s", wantZone: "UTC", every: 1500 * time.Millisecond},
		{spec: "@every 1h30m", wantZone: "UTC", every: 90 * time.Minute},
	} {
		s, err := schedule.Parse(tc.spec, tc.zone)
		if err != nil {
			t.Errorf("Parse(%q, %q): %v", tc.spec, tc.zone, err)
			continue
		}
		if s.String() != tc.spec {
			t.Errorf("Parse(%q).String() = %q, want the spec as given", tc.spec, s.String())
		}
		if s.Zone() != tc.wantZone {
			t.Errorf("Parse(%q, %q).Zone() = %q, want %q", tc.spec, tc.zone, s.Zone(), tc.wantZone)
		}
		d, ok := s.Every()
		if d != tc.every || ok != (tc.every > 0) {
			t.Errorf("Parse(%q).Every() = %v, %v; want %v, %v", tc.spec, d, ok, tc.every, tc.every > 0)
		}
	}
}

// Each bad spec or zone is a *ParseError with the arguments and a reason
// that names the problem.
func TestParse_Invalid(t *testing.T) {
	for _, tc := range []struct {
		spec, zone string
		reason     string // the whole reason, or a prefix ending in "…"
	}{
		{spec: "", reason: "empty spec"},
		{spec: "   ", reason: "empty spec"},
		{spec: "* * * *", reason: "4 fields, want 5 (minute hour day-of-month month day-of-week) or 6 (second minute hour day-of-month month day-of-week)"},
		{spec: "* * * * * * *", reason: "7 fields, want 5…"},
		{spec: "0 24 * * *", reason: `field "hour": 24 is out of range 0-23`},
		{spec: "60 * * * *", reason: `field "minute": 60 is out of range 0-59`},
		{spec: "60 * * * * *", reason: `field "second": 60 is out of range 0-59`},
		{spec: "0 0 0 * *", reason: `field "day-of-month": 0 is out of range 1-31`},
		{spec: "0 0 32 * *", reason: `field "day-of-month": 32 is out of range 1-31`},
		{spec: "0 0 * 13 *", reason: `field "month": 13 is out of range 1-12`},
		{spec: "0 0 * 0 *", reason: `field "month": 0 is out of range 1-12`},
		{spec: "0 0 * * 8", reason: `field "day-of-week": 8 is out of range 0-7`},
		{spec: "99999999999999999999 * * * *", reason: `field "minute": 99999999999999999999 is out of range 0-59`},
		{spec: "*/0 * * * *", reason: `field "minute": "*/0": step 0 is out of range 1-60`},
		{spec: "1-10/0 * * * *", reason: `field "minute": "1-10/0": step 0 is out of range 1-60`},
		{spec: "0 */25 * * *", reason: `field "hour": "*/25": step 25 is out of range 1-24`},
		{spec: "*/x * * * *", reason: `field "minute": "*/x": step "x" is not a number`},
		{spec: "*/ * * * *", reason: `field "minute": "*/": step "" is not a number`},
		{spec: "*/-1 * * * *", reason: `field "minute": "*/-1": step "-1" is not a number`},
		{spec: "30-10 * * * *", reason: `field "minute": range 30-10 is backwards: 30 is after 10`},
		{spec: "0 0 * * FRI-MON", reason: `field "day-of-week": range FRI-MON is backwards: 5 is after 1`},
		{spec: "0 0 * * 1-0", reason: `field "day-of-week": range 1-0 is backwards: 1 is after 0`},
		{spec: "x * * * *", reason: `field "minute": "x" is not a number`},
		{spec: "0 0 * FOO *", reason: `field "month": "FOO" is not a number or a month name (JAN-DEC)`},
		{spec: "0 0 * * FUN", reason: `field "day-of-week": "FUN" is not a number or a weekday name (SUN-SAT)`},
		{spec: "0 0 * * MONDAY", reason: `field "day-of-week": "MONDAY" is not a number or a weekday name (SUN-SAT)`},
		{spec: "0 0 JAN * *", reason: `field "day-of-month": "JAN" is not a number`},
		{spec: "+5 * * * *", reason: `field "minute": "+5" is not a number`},
		{spec: "-5 * * * *", reason: `field "minute": "-5" is not a valid element (want *, a number, a-b, */n, a-b/n or a/n)`},
		{spec: "5- * * * *", reason: `field "minute": "5-" is not a valid element…`},
		{spec: "1-2-3 * * * *", reason: `field "minute": "2-3" is not a number`},
		{spec: "1,,2 * * * *", reason: `field "minute": "1,,2" has an empty list element`},
		{spec: "1, * * * *", reason: `field "minute": "1," has an empty list element`},
		{spec: "? * * * *", reason: `field "minute": "?" is allowed only in day-of-month and day-of-week`},
		{spec: "0 0 ?/2 * *", reason: `field "day-of-month": "?/2": ? takes no step`},
		{spec: "0 0 * * 1/2/3", reason: `field "day-of-week": "1/2/3": step "2/3" is not a number`},
		{spec: "@often", reason: "unknown macro \"@often\" (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)"},
		{spec: "@daily 5", reason: "@daily takes no arguments"},
		{spec: "@every", reason: `@every takes one duration, e.g. "@every 5m"`},
		{spec: "@every 1m 2m", reason: `@every takes one duration…`},
		{spec: "@every soon", reason: `@every: "soon" is not a duration, such as 90s, 5m or 1h30m`},
		{spec: "@every 500ms", reason: "@every: 500ms is less than 1s"},
		{spec: "@every 0s", reason: "@every: 0s is less than 1s"},
		{spec: "@every -1m", reason: "@every: -1m0s is less than 1s"},
		{spec: "@every 1.0000005s", reason: "@every: 1.0000005s is not a whole number of milliseconds"},
		{spec: "@daily", zone: "Local", reason: `zone "Local" depends on the machine…`},
		{spec: "@daily", zone: "Mars/Olympus_Mons", reason: `unknown time zone "Mars/Olympus_Mons"`},
		{spec: "@every 1m", zone: "Nowhere", reason: `unknown time zone "Nowhere"`},
		{spec: "* * * * *", zone: "../etc/passwd", reason: `unknown time zone "../etc/passwd"`},
	} {
		_, err := schedule.Parse(tc.spec, tc.zone)
		var pe *schedule.ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%q, %q) = %v, want a *ParseError", tc.spec, tc.zone, err)
			continue
		}
		if pe.Spec != tc.spec || pe.Zone != tc.zone {
			t.Errorf("Parse(%q, %q): ParseError has Spec %q, Zone %q", tc.spec, tc.zone, pe.Spec, pe.Zone)
		}
		if prefix, ok := strings.CutSuffix(tc.reason, "…"); ok {
			if !strings.HasPrefix(pe.Reason, prefix) {
				t.Errorf("Parse(%q, %q): Reason %q, want it to start with %q", tc.spec, tc.zone, pe.Reason, prefix)
			}
		} else if pe.Reason != tc.reason {
			t.Errorf("Parse(%q, %q): Reason\n %q, want\n %q", tc.spec, tc.zone, pe.Reason, tc.reason)
		}
		if !strings.HasPrefix(err.Error(), "schedule: bad spec ") || !strings.HasSuffix(err.Error(), pe.Reason) {
			t.Errorf("Parse(%q, %q): Error() = %q", tc.spec, tc.zone, err)
		}
	}
}

// The message names the zone only when one was given.
func TestParseError_Error(t *testing.T) {
	e := &schedule.ParseError{Spec: "@often", Zone: "Europe/Berlin", Reason: "unknown macro"}
	if got, want := e.Error(), `schedule: bad spec "@often" in zone "Europe/Berlin": unknown macro`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e.Zone = ""
	if got, want := e.Error(), `schedule: bad spec "@often": unknown macro`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
