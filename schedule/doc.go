// Package schedule parses the specifications of schedules and computes
// their nominal fire times, the ticks at which a schedule starts a run. A
// durable schedule starts exactly one run per tick, so this package defines
// the ticks exactly, with no dependence on the machine, its time zone or the
// current time: Next is a pure function of the spec, its zone and an
// instant.
//
// # Specs
//
// A spec is a cron expression, a macro or a fixed interval:
//
//	*/15 * * * *          every quarter hour (minute hour day-of-month month day-of-week)
//	30 0 9 * * MON-FRI    09:00:30 on weekdays (a leading seconds field)
//	@daily                the same as "0 0 * * *"
//	@every 90s            every 90 seconds since the Unix epoch
//
// A cron field is *, a number, a range a-b, a step */n, a-b/n or a/n (from a
// to the field's largest value), or a comma list of those; ? is * in
// day-of-month and day-of-week. Months may be named JAN-DEC and weekdays
// SUN-SAT, in any case. Day-of-week 0 and 7 are both Sunday, and SUN ending
// a range is 7, so that FRI-SUN is Friday to Sunday; * and a/n in
// day-of-week end at 6, Saturday. When both day-of-month and day-of-week
// are restricted (neither is a bare * or ?, so */2 is a restriction), a
// day matches if either matches, as in cron: "0 0 1 * MON" fires on the
// first of the month and on every Monday. The macros are @yearly
// (@annually), @monthly, @weekly, @daily (@midnight) and @hourly.
//
// The interval of "@every d" is a Go duration (time.ParseDuration) of at
// least 1s and a whole number of milliseconds. Its ticks are the instants
// k·d after 1970-01-01T00:00:00Z, whatever the zone and whenever the
// schedule was created: "@every 1h" fires on the hour in UTC, even in a
// zone whose offset is not a whole number of hours, and every 3600s through
// daylight saving transitions.
//
// # Time zones and daylight saving time
//
// The ticks of a cron spec are wall-clock times in the spec's zone, an IANA
// name such as "America/New_York" ("" is UTC; "Local" is refused, since it
// depends on the machine; the package embeds the zones' rules, used where
// the machine has none). Where daylight saving time makes a wall-clock
// time ambiguous, two rules make every tick a single instant:
//
//   - A time in the gap of a spring-forward transition, which does not
//     exist, fires once, moved forward by the length of the gap: "30 2 * * *"
//     in New York fires at 03:30 EDT on 2026-03-08. Matching times that move
//     to the same instant make one tick: with "*/15 * * * *", 02:15 moves to
//     03:15, which matches in its own right, and fires once.
//   - A time repeated by a fall-back transition fires once, at its first
//     occurrence: "30 1 * * *" in New York fires at 01:30 EDT on 2026-11-01
//     and not at 01:30 EST an hour later.
//
// So a daily spec fires once every day, an hourly spec fires 23 times on
// the day the clocks go forward (there is no 02:00 to fire at, and 02:00
// moved to 03:00 is 03:00) and 24 on the day they go back (the repeated
// hour fires once), and no tick is ever an instant that is not a matching
// wall-clock time or the forward move of one.
//
// # Jitter
//
// Jitter spreads the starts of many schedules that share a tick, such as
// every @daily at midnight, without making a start depend on which machine
// computes it: it is a hash of the schedule's name and the nominal tick.
package schedule
