package snippets_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestExamples_ImportOnlyPublicPackages keeps README's promise that a copy
// of an example program builds in a module of one's own: no file of a
// program under examples/ (its tests aside) imports an internal package,
// which Go refuses to build outside this repository.
func TestExamples_ImportOnlyPublicPackages(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		files++
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(p+"/", "/internal/") {
				rel, _ := filepath.Rel(filepath.Dir(root), path)
				t.Errorf("%s imports %s: a copy of the example would not build outside the repository", rel, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 7 {
		t.Errorf("found %d example files; the walk is broken", files)
	}
}
