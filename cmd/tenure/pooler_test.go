package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// TestDocs_ConnectionPoolersRunThroughPgbouncer runs what the "Connection
// poolers" section of docs/operations.md shows, through a real pgbouncer in
// transaction mode: the Go program (with its direct LISTEN connection), and
// the shell block's URL and CLI commands.
func TestDocs_ConnectionPoolersRunThroughPgbouncer(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Connection poolers\n")
	if !ok {
		t.Fatal(`no "Connection poolers" section in docs/operations.md`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	program := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindStringSubmatch(section)
	shell := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(section)
	if program == nil || shell == nil {
		t.Fatal("the Connection poolers section lacks its Go program or its shell block")
	}

	// The URL the docs export: pgx must read the exec mode from it.
	exported := regexp.MustCompile(`export DATABASE_URL='([^']+)'`).FindStringSubmatch(shell[1])
	if exported == nil {
		t.Fatalf("no DATABASE_URL exported in:\n%s", shell[1])
	}
	cfg, err := pgx.ParseConfig(exported[1])
	if err != nil || cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheDescribe {
		t.Fatalf("the documented URL %s: exec mode %v, %v; want cache_describe", exported[1], cfg.DefaultQueryExecMode, err)
	}
	_, settings, _ := strings.Cut(exported[1], "?")

	direct := freshDatabase(t) // the program uses the default schema
	pooled := pgtest.Pgbouncer(t, direct, "transaction") + "&" + settings

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program[1]), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", filepath.Join(dir, "main.go"))
	cmd.Env = append(withoutDatabaseURL(os.Environ()), "DATABASE_URL="+pooled, "DIRECT_DATABASE_URL="+direct)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run the Connection poolers program: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Hello, Ada!\n") || strings.Contains(string(out), "WARN") {
		t.Fatalf("the program printed:\n%s", out)
	}

	for _, line := range strings.Split(shell[1], "\n") {
		args := strings.Fields(strings.TrimSpace(line))
		if len(args) == 0 || args[0] != "tenure" {
			continue
		}
		r := tenureAt(t, pooled, store.DefaultSchema, args[1:]...)
		expect(t, r, 0)
		if args[1] == "runs" {
			expect(t, r, 0, "hello", "completed")
		}
	}
}

// The CLI's commands work through pgbouncer in transaction mode in every exec
// mode the docs name: migrations, the read commands and a dry-run requeue.
func TestCLI_ThroughTransactionPgbouncer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, checkAddress, shipOnly)
	bad, err := sdk.Start(t.Context(), e.client, checkAddress, order{ID: 1})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := sdk.Start(t.Context(), e.client, shipOnly, order{ID: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(t, bad); err == nil {
		t.Fatal("check-address succeeded; want a failure")
	}
	if _, err := wait(t, ok); err != nil {
		t.Fatal(err)
	}
	through := pgtest.Pgbouncer(t, pgtest.URL(t), "transaction")
	for _, mode := range []string{"cache_describe", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			url := through + "&default_query_exec_mode=" + mode
			empty := pgtest.Schema(t)
			expect(t, tenureAt(t, url, empty, "migrate", "up"), 0, "migrated from version 0 to")
			expect(t, tenureAt(t, url, empty, "migrate", "status"), 0, "0001", "applied")

			s, id := e.schema, bad.ID.String()
			expect(t, tenureAt(t, url, s, "runs", "list"), 0, id, ok.ID.String(), "non_retryable")
			expect(t, tenureAt(t, url, s, "runs", "show", id), 0, "step 1  validate  failed: non_retryable", "invalid address")
			expect(t, tenureAt(t, url, s, "failures", "list", "--since", "1h"), 0, id, "invalid address")
			expect(t, tenureAt(t, url, s, "failures", "list", "--json"), 0, `"run_id": "`+id)
			expect(t, tenureAt(t, url, s, "failures", "stats"), 0, "validate", "non_retryable")
			expect(t, tenureAt(t, url, s, "explain", id, "1"), 0, "step 1 (validate)")
			expect(t, tenureAt(t, url, s, "failures", "requeue", "--activity", "validate", "--dry-run"), 0, "1 run would be requeued")
			expect(t, tenureAt(t, url, s, "audit"), 0)
		})
	}
}

// Through a transaction pooler in pgx's default exec mode, the CLI's error
// names the cause and the fix instead of pgx's bare 42P05.
func TestCLI_DefaultExecModeThroughTransactionPgbouncerNamesTheFix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shipOnly)
	url := pgtest.Pgbouncer(t, pgtest.URL(t), "transaction")
	failed := 0
	for range 2 * pgtest.PgbouncerPoolSize { // invocations one after another meet each other's statements
		r := tenureAt(t, url, e.schema, "runs", "list")
		if r.code == 0 {
			continue
		}
		failed++
		expect(t, r, exitError, "transaction pooler", "default_query_exec_mode=cache_describe", "42P05")
		if failed == 1 {
			t.Logf("the CLI says: %s", r.stderr)
		}
	}
	if failed == 0 {
		t.Fatal("no invocation met another's prepared statement through pgbouncer")
	}
}
