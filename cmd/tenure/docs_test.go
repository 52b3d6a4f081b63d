package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/pgtest"
)

// TestDocs_GettingStartedRunsAsWritten runs the program of
// docs/getting-started.md with go run, in a database of its own (it uses
// the default schema), checks that it prints what the guide says, and then
// runs the CLI commands the guide shows on the run it made.
func TestDocs_GettingStartedRunsAsWritten(t *testing.T) {
	doc, err := os.ReadFile("../../docs/getting-started.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("no Go program in docs/getting-started.md")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), m[1], 0o644); err != nil {
		t.Fatal(err)
	}
	dbURL := freshDatabase(t)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// Run from this module so that its imports resolve to this checkout.
	cmd := exec.CommandContext(ctx, "go", "run", filepath.Join(dir, "main.go"))
	cmd.Env = append(withoutDatabaseURL(os.Environ()), "DATABASE_URL="+dbURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run the getting-started program: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{"Hello, Ada!\n", "step 1 attempt 1: failed flaky network\n", "step 1 attempt 2: succeeded \n"} {
		if !strings.Contains(got, want) {
			t.Fatalf("output lacks %q:\n%s", want, got)
		}
	}
	runID := regexp.MustCompile(`run ([0-9a-f-]{36})`).FindStringSubmatch(got)
	if runID == nil {
		t.Fatalf("no run ID in the output:\n%s", got)
	}

	cli := func(args ...string) result {
		c := exec.CommandContext(ctx, bin, args...)
		c.Env = append(withoutDatabaseURL(os.Environ()), "DATABASE_URL="+dbURL)
		var stdout, stderr strings.Builder
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return result{stdout.String(), stderr.String(), code}
	}
	expect(t, cli("runs", "list"), 0, runID[1], "hello", "completed")
	expect(t, cli("runs", "show", runID[1]), 0, "step 1  greet  completed", "flaky network", "backoff=constant(200ms)")
	expect(t, cli("explain", runID[1], "1"), 0, "worst case: 400ms")
	expect(t, cli("failures", "list", "--since", "24h"), 0, "no failures match")
}

// freshDatabase creates a database of its own on the test server, dropped at
// cleanup, and returns its URL.
func freshDatabase(t *testing.T) string {
	t.Helper()
	base := pgtest.URL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("gs_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}
