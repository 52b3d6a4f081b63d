package riveradapter_test

import (
	"path/filepath"
	"testing"

	"github.com/tenurehq/tenure/internal/snippets"
)

// TestDocs_AdapterBlocksCompile compiles and vets the Go blocks of
// docs/river.md. They need River and this module, which the core module
// does not require, so they are checked here rather than with the other
// docs' blocks (internal/snippets, TestDocs_EveryGoBlockCompiles).
func TestDocs_AdapterBlocksCompile(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	snippets.Check(t, snippets.Config{
		Root:  root,
		GoMod: "riveradapter/go.mod",
		GoSum: "riveradapter/go.sum",
		Imports: map[string]string{
			"river":        "github.com/riverqueue/river",
			"riverpgxv5":   "github.com/riverqueue/river/riverdriver/riverpgxv5",
			"riveradapter": "github.com/tenurehq/tenure/riveradapter",
		},
		Modules: map[string]string{"github.com/tenurehq/tenure/riveradapter": "riveradapter"},
		StandIns: []string{
			`var p policy.Retry`,
			`var cfg *river.Config`,
			`var pool *pgxpool.Pool`,
		},
	}, "docs/river.md")
}
