package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// printJSON writes v as indented JSON.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table is a tab-aligned table on w; call flush when done.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(toAny(header)...)
	return t
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (t *table) row(cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		// A tab or newline in a cell (an error message, say) would break the columns.
		parts[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(fmt.Sprint(c))
	}
	fmt.Fprintln(t.tw, strings.Join(parts, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// stamp formats a time in UTC, to the second, in a form --since accepts.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// stampPtr is stamp for an optional time; "-" when nil.
func stampPtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}

// ago says how long ago t was, rounded for reading: "3m12s ago".
func ago(t time.Time) string { return roughly(time.Since(t)) + " ago" }

// when says how far t is from now, rounded: "in 4m0s" or "3m12s ago".
func when(t time.Time) string {
	if d := time.Until(t); d > 0 {
		return "in " + roughly(d)
	}
	return ago(t)
}

// roughly rounds d to what a person reads: ms below a second, s below an
// hour, minutes above.
func roughly(d time.Duration) string {
	switch a := max(d, -d); {
	case a < time.Second:
		return d.Round(time.Millisecond).String()
	case a < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

// clip shortens s to n runes for a table cell.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// dash is s, or "-" when s is empty, so that table cells are never blank.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// parseAge reads a duration as Go writes it ("90m", "36h") or in days ("30d").
func parseAge(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 {
			return 0, fmt.Errorf("invalid age %q: want e.g. 30d, 36h or 90m", s)
		}
		if int64(days) > int64(math.MaxInt64/(24*time.Hour)) { // would wrap around to a short or negative age
			return 0, fmt.Errorf("invalid age %q: at most %dd", s, int64(math.MaxInt64/(24*time.Hour)))
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid age %q: want e.g. 30d, 36h or 90m", s)
	}
	return d, nil
}

// parseSince reads a point in time: an age back from now ("24h", "7d"), an
// RFC 3339 time or a date (2006-01-02, UTC). Empty is the zero time.
func parseSince(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := parseAge(s); err == nil {
		return time.Now().Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("invalid time %q: want an age (24h, 7d), an RFC 3339 time or a date (2006-01-02)", s)
}

// isTerminal reports whether f is a character device (a terminal), so that
// progress bars are drawn only for people, never into a pipe or a log.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	info, err := file.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// plural is n with the noun that fits it: "1 run", "2 runs", "0 runs". The
// plurals of the nouns used here all add an s.
func plural(n int64, noun string) string {
	if n == 1 || n == -1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// payloadCap is how much of a run's input or output runs show prints in a
// table: enough to recognise it, not enough to flood a terminal.
const payloadCap = 2048

// payload is a JSON payload for a table cell, cut to payloadCap bytes (at a
// character boundary) with a note saying so; "-" when there is none.
func payload(raw []byte) string {
	if raw == nil {
		return "-"
	}
	if len(raw) <= payloadCap {
		return string(raw)
	}
	cut := payloadCap
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (first %d of %d bytes; --json prints it whole)", raw[:cut], cut, len(raw))
}
