package tenuretest_test

import (
	"context"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/snippets"
	"github.com/tenurehq/tenure/tenuretest"
)

// TestDocs_TestingGuideRunsAsWritten builds the Go blocks of docs/testing.md
// as the module example.com/shop that they say they are (the first block is
// the package, the others its test files), on this checkout of Tenure, and
// runs its tests twice: against the test database through DATABASE_URL, and
// without DATABASE_URL, on a private cluster of their own. Every test must
// pass both times. Line directives make the compiler, and the tests, name
// the guide's lines.
func TestDocs_TestingGuideRunsAsWritten(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := snippets.Extract("docs/testing.md", doc)
	if len(blocks) < 5 {
		t.Fatalf("found %d go blocks in docs/testing.md; the parser or the guide is broken", len(blocks))
	}
	guide, err := filepath.Abs("../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var tests []string
	for i, b := range blocks {
		src := []byte(b.Code)
		if formatted, err := format.Source(src); err != nil || string(formatted) != string(src) {
			t.Errorf("%s:%d: the block is not gofmt'ed (%v)", b.File, b.Line, err)
		}
		name := fmt.Sprintf("shop_%d_test.go", i)
		switch {
		case i == 0 && strings.HasPrefix(string(src), "package shop\n"):
			name = "shop.go"
		case i == 0 || !strings.HasPrefix(string(src), "package shop_test\n"):
			t.Fatalf("%s:%d: the block is not the package shop (first) or one of its test files", b.File, b.Line)
		}
		for _, m := range regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`).FindAllSubmatch(src, -1) {
			tests = append(tests, string(m[1]))
		}
		src = append([]byte(fmt.Sprintf("//line %s:%d:1\n", guide, b.Line)), src...)
		if err := os.WriteFile(filepath.Join(dir, name), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeModule(t, dir)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", "shop.test", ".")
	build.Dir = dir
	// Offline: the module's requirements are Tenure's, already in the module cache.
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the guide's module: %v\n%s", err, strings.ReplaceAll(string(out), filepath.Dir(filepath.Dir(guide))+string(filepath.Separator), ""))
	}
	for _, withURL := range []bool{true, false} {
		env := withoutDatabaseURL(os.Environ())
		if withURL {
			env = append(env, tenuretest.EnvVar+"="+tenuretest.URL(t))
		}
		run := exec.CommandContext(ctx, filepath.Join(dir, "shop.test"), "-test.v", "-test.count=1")
		run.Dir, run.Env = dir, env
		began := time.Now()
		out, err := run.CombinedOutput()
		t.Logf("DATABASE_URL set: %v: the guide's tests took %s", withURL, time.Since(began).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("the guide's tests (DATABASE_URL set: %v): %v\n%s", withURL, err, out)
		}
		for _, name := range tests {
			if !strings.Contains(string(out), "--- PASS: "+name+" ") {
				t.Errorf("DATABASE_URL set: %v: %s did not pass:\n%s", withURL, name, out)
			}
		}
	}
	if len(tests) < 6 {
		t.Errorf("the guide has %d tests: %v", len(tests), tests)
	}
}

// writeModule makes dir the module example.com/shop, requiring what Tenure
// requires, and this checkout of Tenure.
func writeModule(t *testing.T, dir string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mod := strings.Replace(string(gomod), "module github.com/tenurehq/tenure\n", "module example.com/shop\n", 1)
	mod += "\nrequire github.com/tenurehq/tenure v0.0.0\n\nreplace github.com/tenurehq/tenure => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
}

func withoutDatabaseURL(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, tenuretest.EnvVar+"=") {
			out = append(out, kv)
		}
	}
	return out
}
