package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
)

// A list command prints at most --limit rows. When more match, it says so on
// stderr with a cursor for the next page (--after), so that its stdout, a
// table or a JSON array, stays clean for pipes; --all prints every page.
//
// A cursor is the position of the page's last row in the listing's order:
// its time (to the microsecond, as PostgreSQL keeps it) and its ID, encoded
// as one shell-safe word whose first letter says which listing it is for.

// runCursor is the cursor after the run created at created with id.
func runCursor(created time.Time, id uuid.UUID) string {
	b := binary.BigEndian.AppendUint64(nil, uint64(created.UnixMicro()))
	return "r" + base64.RawURLEncoding.EncodeToString(append(b, id[:]...))
}

// parseRunCursor reads a cursor of runs list.
func parseRunCursor(s string) (time.Time, uuid.UUID, error) {
	b, err := decodeCursor(s, 'r', 8+16)
	if err != nil {
		return time.Time{}, uuid.Nil, err
	}
	return time.UnixMicro(int64(binary.BigEndian.Uint64(b))), uuid.UUID(b[8:]), nil
}

// failureCursor is the cursor after the failure row id that failed at
// failed.
func failureCursor(failed time.Time, id int64) string {
	b := binary.BigEndian.AppendUint64(nil, uint64(failed.UnixMicro()))
	b = binary.BigEndian.AppendUint64(b, uint64(id))
	return "f" + base64.RawURLEncoding.EncodeToString(b)
}

// parseFailureCursor reads a cursor of failures list.
func parseFailureCursor(s string) (time.Time, int64, error) {
	b, err := decodeCursor(s, 'f', 8+8)
	if err != nil {
		return time.Time{}, 0, err
	}
	return time.UnixMicro(int64(binary.BigEndian.Uint64(b))), int64(binary.BigEndian.Uint64(b[8:])), nil
}

func decodeCursor(s string, kind byte, n int) ([]byte, error) {
	listings := map[byte]string{'r': "runs list", 'f': "failures list"}
	bad := usagef("--after: %q is not a cursor: give the one %s printed after \"more: --after\"", s, listings[kind])
	switch {
	case s == "":
		return nil, bad
	case s[0] != kind && listings[s[0]] != "":
		return nil, usagef("--after: %s is a cursor of %s, not of %s", s, listings[s[0]], listings[kind])
	case s[0] != kind:
		return nil, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(s[1:])
	if err != nil || len(b) != n {
		return nil, bad
	}
	return b, nil
}

// more tells on stderr that a listing stopped at its limit, and how to go
// on.
func (a *app) more(n int, noun, cursor string) {
	fmt.Fprintf(a.stderr, "more: --after %s (listed %s, more match; --all lists every one)\n", cursor, plural(int64(n), noun))
}

// noneMatch says on stderr that a listing of noun (a plural) matched
// nothing, which is no error: stdout stays empty, without a table's header,
// as with --json it holds [] alone.
func (a *app) noneMatch(noun string) error {
	fmt.Fprintf(a.stderr, "no %s match\n", noun)
	return nil
}

// jsonArray writes a JSON array one element at a time, as printJSON would
// write the whole slice, so that --all streams pages of any length.
type jsonArray struct {
	w io.Writer
	n int
}

func (j *jsonArray) add(v any) error {
	b, err := json.MarshalIndent(v, "  ", "  ")
	if err != nil {
		return err
	}
	sep := ",\n  "
	if j.n == 0 {
		sep = "[\n  "
	}
	j.n++
	_, err = fmt.Fprintf(j.w, "%s%s", sep, b)
	return err
}

func (j *jsonArray) close() error {
	end := "\n]\n"
	if j.n == 0 {
		end = "[]\n"
	}
	_, err := io.WriteString(j.w, end)
	return err
}
