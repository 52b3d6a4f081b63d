package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// usage is the line run adds to every usage error.
const usage = `Run "tenure --help" for usage.` + "\n"

// TestCLI_FlagsAreCheckedBeforeAnythingRuns: a reason that does not exist,
// a status that does not exist and a count below 1 are usage errors that
// name the flag, not an empty result or "unlimited".
func TestCLI_FlagsAreCheckedBeforeAnythingRuns(t *testing.T) {
	s := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pgtest.Pool(t), store.WithSchema(s)); err != nil {
		t.Fatal(err)
	}
	const reasons = "retries_exhausted, rescues_exhausted, non_retryable, indeterminate, deadline_exceeded, nondeterminism, panic, workflow_error, bad_input, cancelled"
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"failures", "list", "--reason", "nope"}, `--reason: unknown reason "nope": want one of ` + reasons},
		{[]string{"failures", "requeue", "--reason", "lost", "--dry-run"}, `--reason: unknown reason "lost": want one of ` + reasons},
		{[]string{"failures", "list", "--limit", "0"}, "--limit must be at least 1, got 0"},
		{[]string{"failures", "list", "--limit", "-1"}, "--limit must be at least 1, got -1"},
		{[]string{"runs", "list", "--limit", "0"}, "--limit must be at least 1, got 0"},
		{[]string{"runs", "list", "--limit", "-1"}, "--limit must be at least 1, got -1"},
		{[]string{"audit", "--limit", "0"}, "--limit must be at least 1, got 0"},
		{[]string{"failures", "requeue", "--all", "--batch-size", "0"}, "--batch-size must be at least 1, got 0"},
		{[]string{"runs", "list", "--status", "done"}, `--status: unknown status "done": want one of queued, running, completed, failed, cancelled`},
		{[]string{"runs", "count", "--status", "done"}, `--status: unknown status "done": want one of queued, running, completed, failed, cancelled`},
		{[]string{"runs", "list", "--all", "--limit", "0"}, "--limit must be at least 1, got 0"},
		{[]string{"failures", "list", "--all", "--limit", "0"}, "--limit must be at least 1, got 0"},
		{[]string{"runs", "result", "--key", "k", "--timeout", "-1s"}, "--timeout: want a positive duration such as 30s, 10m or 1d"},
	} {
		got := tenure(t, s, c.args...)
		if want := "tenure: " + c.stderr + "\n" + usage; got.code != 2 || got.stderr != want || got.stdout != "" {
			t.Errorf("tenure %s:\n%s\nwant exit 2 and stderr:\n%s", strings.Join(c.args, " "), got, want)
		}
	}
	// What is right passes.
	expect(t, tenure(t, s, "failures", "list", "--reason", "bad_input", "--limit", "1"), 0, "no failures match")
	expect(t, tenure(t, s, "runs", "list", "--status", "cancelled", "--limit", "1"), 0, "no runs match")
	expect(t, tenure(t, s, "audit", "--limit", "1"), 0, "the audit log is empty")
}

// TestCLI_EachErrorIsPrintedOnce: one "tenure: " before a message that
// carries its own, and a connection error that pgx words alike for each
// attempt (TLS, then plain, with the default sslmode=prefer) said once.
func TestCLI_EachErrorIsPrintedOnce(t *testing.T) {
	got := tenure(t, "Bad", "runs", "list")
	want := `tenure: invalid schema name "Bad": want a lower-case identifier matching ^[a-z_][a-z0-9_]{0,62}$` + "\n" + usage
	if got.code != 2 || got.stderr != want {
		t.Fatalf("--schema Bad:\n%s\nwant stderr:\n%s", got, want)
	}

	got = tenureAt(t, "postgres://postgres@127.0.0.1:1/test", "tenure", "runs", "list")
	want = "tenure: connect to the database in DATABASE_URL: failed to connect to `user=postgres database=test`:\n" +
		"\t127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused\n"
	if got.code != 1 || got.stderr != want {
		t.Fatalf("an unreachable database:\n%s\nwant stderr:\n%s", got, want)
	}
}

// TestCLI_MissingSchemaNamesTheSchemasThatHoldTenure: the demo writes to
// tenure_demo, so a tenure command without --schema there finds no tables;
// the error says where they are.
func TestCLI_MissingSchemaNamesTheSchemasThatHoldTenure(t *testing.T) {
	url := freshDatabase(t)
	// No Tenure schema at all: migrate.
	got := tenureAt(t, url, "tenure", "failures", "list")
	want := `tenure: schema "tenure" has no Tenure tables; run "tenure migrate up" to create them` + "\n"
	if got.code != exitSchema || got.stderr != want {
		t.Fatalf("an empty database:\n%s\nwant exit 4 and stderr:\n%s", got, want)
	}

	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := store.Migrate(t.Context(), pool, store.WithSchema("tenure_demo")); err != nil {
		t.Fatal(err)
	}
	got = tenureAt(t, url, "tenure", "runs", "show", "--key", "order-42")
	want = `tenure: schema "tenure" has no Tenure tables; Tenure schemas here: tenure_demo (use --schema tenure_demo), ` +
		`or run "tenure migrate up" to create them` + "\n"
	if got.code != exitSchema || got.stderr != want {
		t.Fatalf("a database with tenure_demo only:\n%s\nwant exit 4 and stderr:\n%s", got, want)
	}
	expect(t, tenureAt(t, url, "tenure_demo", "runs", "list"), 0, "no runs match")

	if err := store.Migrate(t.Context(), pool, store.WithSchema("billing")); err != nil {
		t.Fatal(err)
	}
	got = tenureAt(t, url, "orders", "audit")
	want = `tenure: schema "orders" has no Tenure tables; Tenure schemas here: billing, tenure_demo (use --schema NAME), ` +
		`or run "tenure migrate up --schema orders" to create them` + "\n"
	if got.code != exitSchema || got.stderr != want {
		t.Fatalf("a database with two Tenure schemas:\n%s\nwant exit 4 and stderr:\n%s", got, want)
	}

	// A schema that holds Tenure's tables at an older version keeps the
	// store's error: it is there, and behind.
	if _, err := pool.Exec(t.Context(), `DELETE FROM billing.schema_version WHERE version = (SELECT max(version) FROM billing.schema_version)`); err != nil {
		t.Fatal(err)
	}
	expect(t, tenureAt(t, url, "billing", "audit"), exitSchema, `schema "billing" is at version`)
}

// TestCLI_VersionFlagPrintsWhatVersionPrints: --version, on any command
// line, prints the release and the schema version without a database.
func TestCLI_VersionFlagPrintsWhatVersionPrints(t *testing.T) {
	run := func(args ...string) string {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Env = withoutDatabaseURL(os.Environ())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tenure %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	want := versionLine() + "\n"
	for _, args := range [][]string{{"--version"}, {"version"}, {"--schema", "x", "--version"}} {
		if got := run(args...); got != want {
			t.Errorf("tenure %v printed %q, want %q", args, got, want)
		}
	}
	if !strings.HasPrefix(want, "tenure "+sdk.Version+" (schema version "+strconv.Itoa(store.LatestVersion())+", go") {
		t.Fatalf("version line %q lacks the release or the schema version", want)
	}
}

// TestCLI_HelpAndDocsNameRealCommands: every "tenure ..." command line in the
// root help, the examples of every command, the package comment and the
// CLI blocks of docs/operations.md names a command that exists.
func TestCLI_HelpAndDocsNameRealCommands(t *testing.T) {
	a := &app{ctx: context.Background(), stdout: io.Discard, stderr: io.Discard}
	root := a.rootCommand()
	var texts []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		texts = append(texts, c.Long, c.Example)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	texts = append(texts, string(src))
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		texts = append(texts, "  "+strings.ReplaceAll(m[1], "\n", "\n  "))
	}
	seen := 0
	for _, text := range texts {
		bad, n := notCommands(root, text)
		for _, b := range bad {
			t.Error(b)
		}
		seen += n
	}
	if seen < 20 {
		t.Fatalf("checked only %d command lines: the pattern misses them", seen)
	}
	// The check itself: the command the root help once named.
	if bad, _ := notCommands(root, "  tenure failures count --since 24h"); len(bad) != 1 {
		t.Fatalf("tenure failures count passes the check: %v", bad)
	}
}

// commandLine is a command line in a help text, a comment or a shell block:
// indented, unlike prose that begins with the word tenure.
var commandLine = regexp.MustCompile(`(?m)^(?://)?[ \t]+(tenure(?: [a-z][a-z-]*)+)`)

// notCommands checks the command lines of text against root: it returns one
// message for each that does not end at a command that runs, and how many
// lines it checked.
func notCommands(root *cobra.Command, text string) (bad []string, checked int) {
	for _, m := range commandLine.FindAllStringSubmatch(text, -1) {
		words := strings.Fields(m[1])[1:]
		c := root
		for len(words) > 0 {
			next := findSub(c, words[0])
			if next == nil {
				break
			}
			c, words = next, words[1:]
		}
		if c == root || c.Annotations[groupOnly] != "" || (c.HasSubCommands() && !c.Runnable()) {
			bad = append(bad, fmt.Sprintf("%q is not a command: %q has no subcommand %q", strings.TrimSpace(m[0]), c.CommandPath(), strings.Join(words, " ")))
		}
		checked++
	}
	return bad, checked
}

func findSub(c *cobra.Command, name string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == name {
			return sub
		}
	}
	return nil
}

// TestPlural_AndLeaseDetail: counts and leases read as English.
func TestPlural_AndLeaseDetail(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0 runs"}, {1, "1 run"}, {2, "2 runs"}} {
		if got := plural(c.n, "run"); got != c.want {
			t.Errorf("plural(%d, run) = %q, want %q", c.n, got, c.want)
		}
	}
	d := func(x time.Duration) *time.Duration { return &x }
	for _, c := range []struct {
		r    record.RunSummary
		want string
	}{
		{record.RunSummary{Status: record.RunRunning, Claimant: "w1", LeaseLeft: d(-2 * time.Second)}, "held by w1, lease expired 2s ago"},
		{record.RunSummary{Status: record.RunRunning, Claimant: "w1", LeaseLeft: d(4 * time.Second)}, "held by w1, lease 4s left"},
		{record.RunSummary{Status: record.RunCompleted, Requeues: 1}, "requeued 1 time"},
		{record.RunSummary{Status: record.RunCompleted, Requeues: 3}, "requeued 3 times"},
	} {
		if got := runDetail(c.r); got != c.want {
			t.Errorf("runDetail(%+v) = %q, want %q", c.r, got, c.want)
		}
	}
}
