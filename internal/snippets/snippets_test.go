package snippets_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/snippets"
)

// recorder is a testing.TB that keeps the errors it is given.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.errs = append(r.errs, fmt.Sprint(args...))
	runtime.Goexit()
}

func TestExtract_NumbersBlocksByTheirFirstLineOfCode(t *testing.T) {
	md := "# Title\n\n```go\nx := 1\ny := 2\n```\n\n```sh\nls\n```\n\n  ```go\nindented := true\n  ```\n\n```go\nz := 3\n```\n"
	blocks := snippets.Extract("page.md", []byte(md))
	if len(blocks) != 2 {
		t.Fatalf("found %d blocks, want 2: %+v", len(blocks), blocks)
	}
	want := []snippets.Block{{File: "page.md", Line: 4, Code: "x := 1\ny := 2\n"}, {File: "page.md", Line: 17, Code: "z := 3\n"}}
	for i, b := range blocks {
		if b != want[i] {
			t.Errorf("block %d is %+v, want %+v", i, b, want[i])
		}
	}
	if end := blocks[0].End(); end != 5 {
		t.Errorf("the first block ends at line %d, want 5", end)
	}
}

// Every block that fails is reported with its file and line, and the
// compiler's or vet's message; the blocks that compile are not.
func TestCheck_ReportsEachFailingBlockWithItsFileAndLine(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	const file = "internal/snippets/testdata/blocks.md"
	md, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	line := func(code string) int { // the line of the first line of code
		for _, b := range snippets.Extract(file, md) {
			if strings.HasPrefix(b.Code, code) {
				return b.Line
			}
		}
		t.Fatalf("no block starts with %q", code)
		return 0
	}
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		snippets.Check(rec, snippets.Config{
			Root: root, GoMod: "go.mod", GoSum: "go.sum",
			StandIns: []string{
				"var pool *pgxpool.Pool",
				`var name = "Ada"`,
				// Declared by the first block too, which does without.
				`var Greet = activities.New("greet", func(ctx context.Context, name string) (string, error) { return "", nil })`,
			},
		}, file)
	}()
	<-done
	wants := []string{
		fmt.Sprintf("%s:%d: the block does not compile or vet:\n\tvet: %s:%d:19: not enough arguments in call to w.Start", file, line("w, err :="), file, line("w, err :=")+4),
		fmt.Sprintf("%s:%d: the block is not gofmt'ed; gofmt has it as:\nsum := 1 + 2", file, line("sum")),
		fmt.Sprintf("%s:%d: the block does not compile or vet:\n\tvet: %s:%d:2: undefined: undefinedThing", file, line("package main"), file, line("package main")+3),
		fmt.Sprintf("%s:%d: the block does not compile or vet:\n\t%s:%d:", file, line("package other"), file, line("package other")+4),
		fmt.Sprintf("%s:%d: the block parses neither as declarations", file, line("this is")),
	}
	got := strings.Join(rec.errs, "\n---\n")
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("the errors lack\n%s\nthey are:\n%s", want, got)
		}
	}
	for _, ok := range []string{"var Greet", "greeting, err"} {
		if strings.Contains(got, fmt.Sprintf("%s:%d:", file, line(ok))) {
			t.Errorf("the block at line %d compiles, but is reported:\n%s", line(ok), got)
		}
	}
	if len(rec.errs) != len(wants) {
		t.Errorf("%d errors, want %d:\n%s", len(rec.errs), len(wants), got)
	}
}
