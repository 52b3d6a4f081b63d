package schedule

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/bits"
	"time"
)

// Spec is a parsed schedule: when its nominal ticks fall. Make one with
// Parse; the zero Spec has no ticks. A Spec is a small value, safe to copy
// and to use from several goroutines at once.
type Spec struct {
	text string
	zone string
	loc  *time.Location

	// every is the interval of an @every spec, 0 for a cron spec.
	every time.Duration

	// The fields of a cron spec, one bit per allowed value: bit v of
	// second is set if second v matches. dow has bits 0-6, Sunday being 0.
	second, minute, hour, dom, month, dow mask
	// domStar and dowStar record a day-of-month or day-of-week field that
	// is a bare * or ?, which turns off the either-matches rule.
	domStar, dowStar bool
}

// horizon bounds the search of Next. A cron spec that matches at all
// matches within 8 years, the longest wait being for February 29 across a
// century year that is not a leap year, such as 2100.
const horizon = 10 * 366 * 24 * time.Hour

// Next returns the first nominal tick strictly after t, which may be in any
// location, as a time in the spec's zone. It returns the zero Time when
// there is none within 10 years, for a spec that never matches, such as
// February 30 ("0 0 30 2 *"), and for the zero Spec.
//
// Ticks are whole seconds. Those of a cron spec follow the daylight saving
// rules of the package documentation: a time in a spring-forward gap fires
// once, moved forward by the length of the gap, and a time repeated by a
// fall-back transition fires once, at its first occurrence. Next is correct
// for every t, including one in the repeated hour's second pass, and
// Next(Next(t).Add(-time.Nanosecond)) equals Next(t).
func (s Spec) Next(t time.Time) time.Time {
	if s.loc == nil {
		return time.Time{}
	}
	if s.every > 0 {
		return s.nextEvery(t)
	}
	return s.nextCron(t)
}

// nextEvery returns the first multiple of the interval since the Unix epoch
// that is after t. Intervals are whole milliseconds, so the tick after the
// whole millisecond at or before t is after t too.
func (s Spec) nextEvery(t time.Time) time.Time {
	ms := t.Unix()*1000 + int64(t.Nanosecond())/1e6
	d := s.every.Milliseconds()
	k := ms / d
	if ms%d < 0 {
		k-- // floor division for instants before 1970
	}
	return time.UnixMilli((k + 1) * d).In(s.loc)
}

// nextCron returns the first tick of a cron spec after t.
//
// It walks the zone's periods of constant offset (time.Time.ZoneBounds),
// starting with the one that holds the first whole second after t. Within
// a period [start, end) of offset off, whose predecessor had offset prev,
// the ticks are the instants w-off of the matching wall-clock times w from
// start+max(off, prev), the end of any times repeated from the previous
// period (they fired there, at their first occurrence), to end+off; and,
// when the period begins with a gap (off > prev), the instants w-prev of
// the matching times w of the gap, [start+prev, start+off): reading a time
// of the gap with the offset before the gap moves it forward by the length
// of the gap. The first tick is the smaller of the two candidates; both lie
// in [start, end), so when there is one the later periods need no search.
//
// Wall-clock times are counted in seconds as if they were UTC, so nothing
// here depends on what time.Date does in a gap.
func (s Spec) nextCron(t time.Time) time.Time {
	u := t.Unix() + 1 // the first whole second after t
	limit := u + int64(horizon/time.Second)
	for u < limit {
		at := time.Unix(u, 0).In(s.loc)
		_, off := at.Zone()
		start, end := at.ZoneBounds()
		prev := off
		if !start.IsZero() {
			_, prev = start.Add(-time.Second).Zone()
		}
		hi := limit + int64(off)
		if !end.IsZero() && end.Unix() < limit {
			hi = end.Unix() + int64(off)
		}
		best, found := int64(0), false
		lo := u + int64(off)
		if !start.IsZero() {
			lo = max(lo, start.Unix()+int64(max(off, prev)))
		}
		if w, ok := s.match(lo, hi); ok {
			best, found = w-int64(off), true
		}
		if !start.IsZero() && off > prev {
			glo := max(start.Unix(), u) + int64(prev)
			if w, ok := s.match(glo, start.Unix()+int64(off)); ok {
				if i := w - int64(prev); !found || i < best {
					best, found = i, true
				}
			}
		}
		if found {
			return time.Unix(best, 0).In(s.loc)
		}
		if end.IsZero() {
			break
		}
		u = end.Unix()
	}
	return time.Time{}
}

// match returns the first wall-clock time in [from, until), in seconds since
// 1970-01-01 00:00:00 with no zone, that matches the cron fields. It jumps
// from field to field: a month that does not match skips to the next
// matching month, a day to the next matching day, and so on, so its cost
// does not grow with the length of the wait.
func (s *Spec) match(from, until int64) (int64, bool) {
	if from >= until {
		return 0, false
	}
	days := floorDiv(from, 86400)
	sec := int(from - days*86400)
	y, mo, d := civil(days)
	h, mi, se := sec/3600, sec/60%60, sec%60
	lastYear, _, _ := civil(floorDiv(until-1, 86400))
	for y <= lastYear {
		m := s.month.next(mo)
		if m < 0 {
			y, mo, d, h, mi, se = y+1, 1, 1, 0, 0, 0
			continue
		}
		if m != mo {
			mo, d, h, mi, se = m, 1, 0, 0, 0
		}
		dd := s.nextDay(y, mo, d)
		if dd < 0 {
			mo, d, h, mi, se = mo+1, 1, 0, 0, 0
			continue
		}
		if dd != d {
			d, h, mi, se = dd, 0, 0, 0
		}
		hh := s.hour.next(h)
		if hh < 0 {
			d, h, mi, se = d+1, 0, 0, 0
			continue
		}
		if hh != h {
			h, mi, se = hh, 0, 0
		}
		mm := s.minute.next(mi)
		if mm < 0 {
			h, mi, se = h+1, 0, 0
			continue
		}
		if mm != mi {
			mi, se = mm, 0
		}
		ss := s.second.next(se)
		if ss < 0 {
			mi, se = mi+1, 0
			continue
		}
		w := daysFromCivil(y, mo, d)*86400 + int64(h*3600+mi*60+ss)
		return w, w < until
	}
	return 0, false
}

// nextDay returns the first day from d on in month mo of year y that
// matches the day-of-month and day-of-week fields, or -1 if none does.
func (s *Spec) nextDay(y, mo, d int) int {
	n := daysIn(y, mo)
	if d > n {
		return -1
	}
	wd := weekday(daysFromCivil(y, mo, d))
	for ; d <= n; d++ {
		domOK, dowOK := s.dom.has(d), s.dow.has(wd)
		if domOK && dowOK || !s.domStar && !s.dowStar && (domOK || dowOK) {
			return d
		}
		wd = (wd + 1) % 7
	}
	return -1
}

// String returns the spec as it was given to Parse.
func (s Spec) String() string { return s.text }

// Zone returns the name of the spec's time zone as it was given to Parse,
// or "UTC" if it was "".
func (s Spec) Zone() string { return s.zone }

// Every returns the interval of an @every spec and true, or 0 and false for
// a cron spec or a macro.
func (s Spec) Every() (d time.Duration, ok bool) { return s.every, s.every > 0 }

// Jitter returns a delay in [0, max) for the tick at nominal of the
// schedule called name, or 0 if max <= 0. It spreads the starts of
// schedules that share their ticks, and is deterministic: the same on every
// machine, in every release and for every call. It is the 64-bit FNV-1a hash
// of name followed by nominal.Unix() and nominal.Nanosecond() as big-endian
// 64-bit integers, mixed by the finalizer of MurmurHash3 (so that ticks a
// nanosecond apart get unrelated delays) and scaled to [0, max) as
// hash·max/2⁶⁴. The location of nominal does not matter.
func Jitter(name string, nominal time.Time, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	var buf [16]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(nominal.Unix()))
	binary.BigEndian.PutUint64(buf[8:], uint64(nominal.Nanosecond()))
	h.Write(buf[:])
	hi, _ := bits.Mul64(fmix64(h.Sum64()), uint64(max))
	return time.Duration(hi)
}

// fmix64 is the 64-bit finalizer of MurmurHash3: each bit of its result
// depends on every bit of x.
func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// ParseError is the error Parse returns for a spec or a zone it refuses.
type ParseError struct {
	// Spec and Zone are the arguments of Parse.
	Spec, Zone string
	// Reason says what is wrong and what is allowed, naming the field of a
	// cron spec, e.g. `field "hour": 24 is out of range 0-23`.
	Reason string
}

// Error returns the spec, the zone if one was given, and the reason, e.g.
// `schedule: bad spec "0 24 * * *": field "hour": 24 is out of range 0-23`.
func (e *ParseError) Error() string {
	if e.Zone == "" {
		return fmt.Sprintf("schedule: bad spec %q: %s", e.Spec, e.Reason)
	}
	return fmt.Sprintf("schedule: bad spec %q in zone %q: %s", e.Spec, e.Zone, e.Reason)
}

// mask is a set of small integers, one bit each.
type mask uint64

// has reports whether v is in the set.
func (m mask) has(v int) bool { return m&(1<<uint(v)) != 0 }

// next returns the smallest value >= v in the set, or -1 if there is none.
func (m mask) next(v int) int {
	if v >= 64 {
		return -1
	}
	rest := uint64(m) >> uint(v)
	if rest == 0 {
		return -1
	}
	return v + bits.TrailingZeros64(rest)
}

// floorDiv returns a/b rounded down, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// daysFromCivil returns the number of days from 1970-01-01 to the given
// date of the proleptic Gregorian calendar (Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(int64(y), 400)
	yoe := int64(y) - era*400
	mp := int64(m+9) % 12 // March is 0
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civil is the inverse of daysFromCivil.
func civil(days int64) (y, m, d int) {
	z := days + 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	m = int(mp+2)%12 + 1
	y = int(yoe + era*400)
	if m <= 2 {
		y++
	}
	return y, m, d
}

// weekday returns the day of the week of a day counted from 1970-01-01, a
// Thursday, with Sunday as 0.
func weekday(days int64) int {
	return int((days%7 + 7 + 4) % 7)
}

// daysIn returns the number of days in month m of year y.
func daysIn(y, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
