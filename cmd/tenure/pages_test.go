package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// cursorOf is the cursor a listing cut by its limit printed on stderr, or
// "" when it printed none.
func cursorOf(t *testing.T, r result) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^more: --after (\S+) \(listed \d+ \w+, more match; --all lists every one\)$`).FindStringSubmatch(r.stderr)
	if strings.Contains(r.stdout, "more:") {
		t.Fatalf("the notice of a cut listing is on stdout\n%s", r)
	}
	if m == nil {
		if strings.Contains(r.stderr, "more:") {
			t.Fatalf("a notice without a cursor\n%s", r)
		}
		return ""
	}
	return m[1]
}

// column is the first column of a table's rows, without the header.
func column(out string) []string {
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		ids = append(ids, strings.Fields(l)[0])
	}
	return ids
}

// TestCLI_ListsSayWhenTheirLimitCutThemAndPageOn is issue #20's: failures
// list printed 1,000 of 1,001 failures, and runs list 100 of 101 runs, with
// exit 0 and no word. Now a cut listing says so on stderr with the cursor
// of the next page, --after goes on from there, and --all lists every page;
// stdout stays a table or one JSON array.
func TestCLI_ListsSayWhenTheirLimitCutThemAndPageOn(t *testing.T) {
	f := newFixtures(t)
	s := f.schema
	// 101 failed runs, some created and failed in the same microsecond: only
	// the ID orders those.
	f.exec(`INSERT INTO {schema}.runs (id, workflow, input, status, finished_at, created_at)
		SELECT gen_random_uuid(), 'paged', '{}', 'failed', now(), now() - (i / 3) * interval '1 second'
		FROM generate_series(1, 101) AS i`)
	f.exec(`INSERT INTO {schema}.failures (run_id, workflow, reason, error_message, failed_at)
		SELECT id, workflow, 'workflow_error', 'boom', created_at FROM {schema}.runs`)
	f.exec(`INSERT INTO {schema}.failures (run_id, workflow, reason, error_message, failed_at, requeued_at)
		SELECT r.id, r.workflow, 'workflow_error', 'earlier boom', r.created_at - interval '1 hour', now()
		FROM {schema}.runs r, generate_series(1, 9)`) // history: 101 + 909 = 1,010 failure rows

	var want []string // every run, newest first, as one listing orders them
	rows, err := f.pool.Query(t.Context(), `SELECT id::text FROM `+s+`.runs ORDER BY created_at DESC, id DESC`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	if rows.Err() != nil || len(want) != 101 {
		t.Fatalf("%d runs, %v", len(want), rows.Err())
	}

	// The default limit cuts, and says so.
	r := tenure(t, s, "runs", "list")
	expect(t, r, 0)
	if got := column(r.stdout); !slices.Equal(got, want[:100]) {
		t.Fatalf("runs list: %d runs, want the newest 100\n%s", len(got), r)
	}
	if cursorOf(t, r) == "" || !strings.Contains(r.stderr, "(listed 100 runs, more match") {
		t.Fatalf("runs list cut at 100 says nothing\n%s", r)
	}

	// Page by page: every run once, in order, the last page without a notice.
	var paged []string
	args := []string{"runs", "list", "--limit", "40"}
	for pages := 0; ; pages++ {
		r := tenure(t, s, args...)
		expect(t, r, 0)
		paged = append(paged, column(r.stdout)...)
		c := cursorOf(t, r)
		if c == "" {
			break
		}
		if pages > 3 {
			t.Fatalf("runs list pages on for ever\n%s", r)
		}
		args = []string{"runs", "list", "--limit", "40", "--after", c}
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("pages of 40 listed %d runs, want the 101 in order", len(paged))
	}
	r = tenure(t, s, "runs", "list", "--all", "--limit", "7")
	if got := column(r.stdout); r.code != 0 || !slices.Equal(got, want) || cursorOf(t, r) != "" {
		t.Fatalf("runs list --all in pages of 7: %d runs, want the 101 in order and no notice\n%s", len(got), r)
	}

	// JSON stays one array, cut or whole.
	var listed []struct {
		ID string `json:"id"`
	}
	r = tenure(t, s, "runs", "list", "--limit", "2", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 2 || cursorOf(t, r) == "" {
		t.Fatalf("runs list --limit 2 --json: %d runs, %v\n%s", len(listed), err, r)
	}
	r = tenure(t, s, "runs", "list", "--all", "--limit", "10", "--json")
	listed = nil
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 101 || listed[100].ID != want[100] {
		t.Fatalf("runs list --all --json: %d runs, %v\n%s", len(listed), err, r)
	}
	one := tenure(t, s, "runs", "list", "--limit", "200", "--json")
	if one.stdout != r.stdout {
		t.Fatalf("runs list --all --json printed otherwise than one page of them all:\n%s\nwant:\n%s", r.stdout, one.stdout)
	}
	if r := tenure(t, s, "runs", "list", "--workflow", "none", "--json"); r.code != 0 || r.stdout != "[]\n" {
		t.Fatalf("an empty listing in JSON\n%s", r)
	}

	// failures list: 1,000 of the 1,010 rows of history, then the rest.
	r = tenure(t, s, "failures", "list", "--include-requeued")
	expect(t, r, 0)
	c := cursorOf(t, r)
	if n := len(column(r.stdout)); n != 1000 || c == "" || !strings.Contains(r.stderr, "(listed 1000 failures, more match") {
		t.Fatalf("failures list --include-requeued: %d rows, cursor %q\n%s", n, c, r.stderr)
	}
	r = tenure(t, s, "failures", "list", "--include-requeued", "--after", c)
	if n := len(column(r.stdout)); r.code != 0 || n != 10 || cursorOf(t, r) != "" {
		t.Fatalf("failures list --after: %d rows, want the last 10\n%s", n, r)
	}
	var failures []struct {
		RunID    string    `json:"run_id"`
		FailedAt time.Time `json:"failed_at"`
	}
	r = tenure(t, s, "failures", "list", "--all", "--limit", "300", "--include-requeued", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &failures); err != nil || len(failures) != 1010 || cursorOf(t, r) != "" {
		t.Fatalf("failures list --all --json: %d rows, %v", len(failures), err)
	}
	for i := 1; i < len(failures); i++ {
		if failures[i].FailedAt.After(failures[i-1].FailedAt) {
			t.Fatalf("failures list --all: row %d failed after row %d", i, i-1)
		}
	}
	r = tenure(t, s, "failures", "list", "--limit", "100")
	if n := len(column(r.stdout)); r.code != 0 || n != 100 || cursorOf(t, r) == "" {
		t.Fatalf("open failures, 100 of 101: %d rows\n%s", n, r)
	}
	r = tenure(t, s, "failures", "list", "--limit", "101")
	if n := len(column(r.stdout)); r.code != 0 || n != 101 || cursorOf(t, r) != "" {
		t.Fatalf("open failures, 101 of 101: %d rows and no notice\n%s", n, r)
	}

	// A cursor is for its own listing, and checked.
	runsCursor := cursorOf(t, tenure(t, s, "runs", "list", "--limit", "1"))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"failures", "list", "--after", runsCursor}, "--after: " + runsCursor + " is a cursor of runs list, not of failures list"},
		{[]string{"runs", "list", "--after", c}, "--after: " + c + " is a cursor of failures list, not of runs list"},
		{[]string{"runs", "list", "--after", "r" + uuid.NewString()}, "is not a cursor: give the one runs list printed"},
		{[]string{"runs", "list", "--after", ""}, `--after: "" is not a cursor`},
	} {
		r := tenure(t, s, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("tenure %s:\n%s\nwant exit 2 and %q", strings.Join(c.args, " "), r, c.want)
		}
	}
}

// TestCLI_ListsThatMatchNothingSaySoOnStderr: runs list and failures list
// of nothing print no table header; they say "no … match" on stderr and
// exit 0, and with --json print [] and nothing else, on a page after a
// cursor as on the first.
func TestCLI_ListsThatMatchNothingSaySoOnStderr(t *testing.T) {
	f := newFixtures(t)
	s := f.schema
	last := f.run("other", "completed", "")
	var created time.Time
	f.query(`SELECT created_at FROM {schema}.runs WHERE id = $1`, []any{last}, &created)
	for _, c := range []struct {
		args []string
		noun string
	}{
		{[]string{"runs", "list", "--workflow", "none"}, "runs"},
		{[]string{"runs", "list", "--after", runCursor(created, last)}, "runs"},
		{[]string{"runs", "list", "--status", "failed", "--all"}, "runs"},
		{[]string{"failures", "list"}, "failures"},
		{[]string{"failures", "list", "--workflow", "none", "--all"}, "failures"},
	} {
		r := tenure(t, s, c.args...)
		if want := "no " + c.noun + " match\n"; r.code != 0 || r.stdout != "" || r.stderr != want {
			t.Errorf("%v: want exit 0, stdout empty and %q on stderr\n%s", c.args, want, r)
		}
		r = tenure(t, s, append(c.args, "--json")...)
		var rows []any
		if err := json.Unmarshal([]byte(r.stdout), &rows); r.code != 0 || err != nil || len(rows) != 0 || r.stdout != "[]\n" || r.stderr != "" {
			t.Errorf("%v --json: want [] alone (%v)\n%s", c.args, err, r)
		}
	}
}
