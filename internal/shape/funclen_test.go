package shape_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repo is the repository's root, seen from this package's directory.
const repo = "../.."

// maxLines is the longest a library function may be, from its func keyword
// to its closing brace.
const maxLines = 80

// modules are the directories of the repository that hold a go.mod,
// relative to repo, in lexical order: "." and the nested modules (ui,
// cmd/tenure, ...).
func modules(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != repo && skipped(d.Name()) {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, err := filepath.Rel(repo, filepath.Dir(p))
			out = append(out, rel)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// skipped says whether a directory holds no code of the repository's own:
// test data, vendored code, and hidden or underscored directories, which
// the go command ignores too.
func skipped(dir string) bool {
	return dir == "testdata" || dir == "vendor" || strings.HasPrefix(dir, ".") || strings.HasPrefix(dir, "_")
}

// sourceFiles are the non-test .go files of module mod (relative to repo),
// without those of the modules nested in it.
func sourceFiles(t *testing.T, mod string) []string {
	t.Helper()
	var out []string
	top := filepath.Join(repo, mod)
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == top {
				return nil
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil || skipped(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if n := d.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// funcName is fd's name, a method's as (T).m or (*T).m.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		typ, star = s.X, "*"
	}
	switch x := typ.(type) {
	case *ast.IndexExpr: // a generic type's method
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return "(" + star + id.Name + ")." + fd.Name.Name
	}
	return fd.Name.Name
}

// TestFunctions_NoLibraryFunctionIsOver80Lines parses every non-test .go
// file of every module of the repository and fails on each function of a
// package other than main longer than maxLines, naming it as
// file:line func (N lines).
func TestFunctions_NoLibraryFunctionIsOver80Lines(t *testing.T) {
	mods := modules(t)
	if !slices.Contains(mods, ".") {
		t.Fatalf("modules under %s: %q, not the core module", repo, mods)
	}
	fset := token.NewFileSet()
	var files, funcs int
	for _, mod := range mods {
		for _, p := range sourceFiles(t, mod) {
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if f.Name.Name == "main" {
				continue
			}
			files++
			rel, _ := filepath.Rel(repo, p)
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				funcs++
				from, to := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
				if n := to - from + 1; n > maxLines {
					t.Errorf("%s:%d %s (%d lines)", filepath.ToSlash(rel), from, funcName(fd), n)
				}
			}
		}
	}
	if funcs == 0 {
		t.Fatalf("no function found in the %d library files of %q", files, mods)
	}
	t.Logf("%d modules, %d library files, %d functions", len(mods), files, funcs)
}
