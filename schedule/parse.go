package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	// A copy of the zones' rules in the binary (about 450 KB), read where
	// the machine has none (a container without /usr/share/zoneinfo):
	// every worker reads every zone.
	_ "time/tzdata"
)

// Parse parses spec, a cron expression, a macro or "@every <duration>", for
// time zone zone, an IANA name such as "America/New_York"; "" means UTC.
// The package documentation describes the syntax. Parse returns a
// *ParseError for an empty spec, a wrong number of fields, a value out of
// its field's range, a step of 0, a range whose start is after its end, an
// unknown macro or anything else it cannot read, for an @every interval
// under 1s or not a whole number of milliseconds, and for an unknown zone
// or "Local", which would make the ticks depend on the machine.
//
// The zone of an @every spec does not move its ticks, but it is checked all
// the same and it is the location of the times Next returns.
func Parse(spec, zone string) (Spec, error) {
	fail := func(format string, args ...any) (Spec, error) {
		return Spec{}, &ParseError{Spec: spec, Zone: zone, Reason: fmt.Sprintf(format, args...)}
	}
	s := Spec{text: spec, zone: zone}
	switch zone {
	case "":
		s.zone, s.loc = "UTC", time.UTC
	case "Local":
		return fail(`zone "Local" depends on the machine: name an IANA zone such as "America/New_York", or "" for UTC`)
	default:
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return fail("unknown time zone %q", zone)
		}
		s.loc = loc
	}

	fields := strings.Fields(spec)
	if len(fields) == 0 {
		return fail("empty spec")
	}
	if strings.HasPrefix(fields[0], "@") {
		name := strings.ToLower(fields[0])
		if name == "@every" {
			if len(fields) != 2 {
				return fail(`@every takes one duration, e.g. "@every 5m"`)
			}
			d, err := time.ParseDuration(fields[1])
			if err != nil {
				return fail("@every: %q is not a duration, such as 90s, 5m or 1h30m", fields[1])
			}
			if d < time.Second {
				return fail("@every: %s is less than 1s", d)
			}
			if d%time.Millisecond != 0 {
				return fail("@every: %s is not a whole number of milliseconds", d)
			}
			s.every = d
			return s, nil
		}
		expr, ok := macros[name]
		if !ok {
			return fail("unknown macro %q (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)", fields[0])
		}
		if len(fields) != 1 {
			return fail("%s takes no arguments", name)
		}
		fields = strings.Fields(expr)
	}

	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return fail("%d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (second minute hour day-of-month month day-of-week)", len(fields))
	}
	masks := [...]*mask{&s.second, &s.minute, &s.hour, &s.dom, &s.month, &s.dow}
	for i, f := range cronFields {
		m, reason := f.parse(fields[i])
		if reason != "" {
			return fail("field %q: %s", f.name, reason)
		}
		*masks[i] = m
	}
	s.domStar = fields[3] == "*" || fields[3] == "?"
	s.dowStar = fields[5] == "*" || fields[5] == "?"
	return s, nil
}

// macros are the cron expressions of the @ names.
var macros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// field describes one field of a cron expression.
type field struct {
	name     string
	min, max int
	// last is the largest value of * and a/n: max but for day-of-week,
	// where 7 (Sunday again) is allowed only when written.
	last int
	// names are the names of the values from min on, if the field has any,
	// and what they are called in an error.
	names []string
	what  string
	// question reports whether ? is allowed.
	question bool
}

var cronFields = [...]field{
	{name: "second", min: 0, max: 59, last: 59},
	{name: "minute", min: 0, max: 59, last: 59},
	{name: "hour", min: 0, max: 23, last: 23},
	{name: "day-of-month", min: 1, max: 31, last: 31, question: true},
	{name: "month", min: 1, max: 12, last: 12, what: "a month name (JAN-DEC)",
		names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}},
	{name: "day-of-week", min: 0, max: 7, last: 6, question: true, what: "a weekday name (SUN-SAT)",
		names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}},
}

// parse returns the set of values of text, a comma list, or a reason why it
// is refused.
func (f field) parse(text string) (mask, string) {
	var m mask
	for _, elem := range strings.Split(text, ",") {
		if elem == "" {
			return 0, fmt.Sprintf("%q has an empty list element", text)
		}
		base, stepText, hasStep := strings.Cut(elem, "/")
		var lo, hi int
		switch base {
		case "*":
			lo, hi = f.min, f.last
		case "?":
			if !f.question {
				return 0, `"?" is allowed only in day-of-month and day-of-week`
			}
			if hasStep {
				return 0, fmt.Sprintf("%q: ? takes no step", elem)
			}
			lo, hi = f.min, f.last
		default:
			a, b, isRange := strings.Cut(base, "-")
			if a == "" || isRange && b == "" {
				return 0, fmt.Sprintf("%q is not a valid element (want *, a number, a-b, */n, a-b/n or a/n)", elem)
			}
			var reason string
			if lo, reason = f.value(a); reason != "" {
				return 0, reason
			}
			switch {
			case isRange:
				if hi, reason = f.value(b); reason != "" {
					return 0, reason
				}
				if f.max == 7 && lo > 0 && strings.EqualFold(b, "SUN") {
					hi = 7 // FRI-SUN is Friday to Sunday
				}
				if lo > hi {
					return 0, fmt.Sprintf("range %s is backwards: %d is after %d", base, lo, hi)
				}
			case hasStep:
				hi = max(lo, f.last)
			default:
				hi = lo
			}
		}
		step := 1
		if hasStep {
			span := f.last - f.min + 1
			n, err := strconv.Atoi(stepText)
			switch {
			case stepText == "" || !digits(stepText):
				return 0, fmt.Sprintf("%q: step %q is not a number", elem, stepText)
			case err != nil || n < 1 || n > span:
				return 0, fmt.Sprintf("%q: step %s is out of range 1-%d", elem, stepText, span)
			}
			step = n
		}
		for v := lo; v <= hi; v += step {
			m |= 1 << uint(v)
		}
	}
	if f.max == 7 && m.has(7) { // day-of-week 7 is Sunday
		m = m&^(1<<7) | 1
	}
	return m, ""
}

// value returns the number or name text stands for, or a reason why it is
// refused.
func (f field) value(text string) (int, string) {
	if digits(text) {
		n, err := strconv.Atoi(text)
		if err != nil || n < f.min || n > f.max {
			return 0, fmt.Sprintf("%s is out of range %d-%d", text, f.min, f.max)
		}
		return n, ""
	}
	for i, name := range f.names {
		if strings.EqualFold(text, name) {
			return f.min + i, ""
		}
	}
	if f.names != nil {
		return 0, fmt.Sprintf("%q is not a number or %s", text, f.what)
	}
	return 0, fmt.Sprintf("%q is not a number", text)
}

// digits reports whether text is one or more ASCII digits.
func digits(text string) bool {
	for _, c := range []byte(text) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return text != ""
}
