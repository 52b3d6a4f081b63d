package exampledb

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// ProgramEnv is set to "1" in the environment of the example program that
// RunProgram runs. An example's TestMain runs the program when it is set:
//
//	if os.Getenv(exampledb.ProgramEnv) != "" {
//		main()
//		os.Exit(0)
//	}
const ProgramEnv = "TENURE_EXAMPLE_PROGRAM"

// RunProgram runs the example program of the test's package as go run runs
// it, as the test binary (see ProgramEnv), with no argument and without
// DATABASE_URL: the program starts a private cluster of its own (package
// devdb), so that its fixed schema meets no other run's. It fails the test
// when the program exits with an error, writes anything to stderr (a
// warning at start-up included: an example starts quietly) or does not
// first say, on its first line, which schema and database it uses, and
// returns what the program wrote to stdout.
func RunProgram(t testing.TB, timeout time.Duration) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, ProgramEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err = cmd.Run()
	t.Logf("the program ran for %s", time.Since(began).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("the program: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("the program wrote to stderr (an example starts, and runs, quietly):\n%s", stderr.String())
	}
	first, _, _ := strings.Cut(stdout.String(), "\n")
	if !strings.HasPrefix(first, "schema ") || !strings.HasSuffix(first, " (a private cluster, removed on exit; set DATABASE_URL to keep the data)") {
		t.Errorf("the program's first line is %q, want the schema and the private cluster it uses", first)
	}
	return stdout.String()
}
