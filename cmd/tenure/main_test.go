package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// bin is the tenure binary built for these tests.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenure-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "tenure")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := noleaks.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// result of one tenure invocation.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// tenure runs the binary against the test database and schema.
func tenure(t *testing.T, schema string, args ...string) result {
	t.Helper()
	return tenureAt(t, pgtest.URL(t), schema, args...)
}

// tenureAt runs the binary against the database at url and schema.
func tenureAt(t *testing.T, url, schema string, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, append([]string{"--schema", schema}, args...)...)
	cmd.Env = append(withoutDatabaseURL(os.Environ()), "DATABASE_URL="+url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run tenure %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

func withoutDatabaseURL(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			out = append(out, kv)
		}
	}
	return out
}

// expect checks the exit status and that stdout+stderr hold every want.
func expect(t *testing.T, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\n%s", r.code, code, r)
	}
	all := r.stdout + r.stderr
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Fatalf("output lacks %q\n%s", w, r)
		}
	}
}

// env is a migrated schema with a client and a running in-process worker.
type env struct {
	schema string
	pool   *pgxpool.Pool
	client *sdk.Client
}

func newEnv(t *testing.T, defs ...sdk.Definition) *env {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(pool, runtime.Config{
		Schema: schema, LeaseTTL: 5 * time.Second, HeartbeatInterval: time.Second,
		PollInterval: 20 * time.Millisecond, Label: "cli-test-worker", BuildID: "cli-test-build",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(defs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return &env{schema: schema, pool: pool, client: client}
}

// wait returns a run's result, failing the test after 20s.
func wait[Out any](t *testing.T, r *sdk.Run[Out]) (Out, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := r.Result(ctx)
	if ctx.Err() != nil {
		t.Fatalf("run %s: no result in 20s", r.ID)
	}
	return out, err
}
