// Package snippets compiles the Go blocks of Markdown files, so that the
// code in README.md and docs/ cannot drift from the API it shows: a test
// hands Check the files, and a block that no longer compiles, or is not
// gofmt'ed, fails it with the file and line of the block.
//
// Each ```go block is compiled in a throwaway module that requires what a
// module of the checkout requires (Config.GoMod, Config.GoSum), with
// github.com/tenurehq/tenure replaced by the checkout, offline, and checked
// by go vet. A block is one of three things, tried in this order:
//
//   - a file: it begins with a package clause, and is compiled as it is,
//     with the other files of the same Markdown file and package;
//   - declarations (var, func, type …): they are compiled as a file of a
//     package of their own;
//   - statements: they are compiled as the body of a function
//     func(ctx context.Context) error, so a block may use ctx and return an
//     error; a variable it declares and does not use again is fine.
//
// Declarations and statements get their imports from the package names they
// use (see Config.Imports), and may use the declarations of
// Config.StandIns, the types and values a fragment assumes (OrderIn, pool,
// a worker w …) that the page does not declare. Line directives map every
// position the compiler or vet reports back to the Markdown file.
package snippets

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Block is one ```go block of a Markdown file.
type Block struct {
	File string // the Markdown file, as given to Extract
	Line int    // the line of the block's first line of code, from 1
	Code string // the block's code, without its fences, ending in a newline
}

// End returns the line of the block's last line of code.
func (b Block) End() int { return b.Line + strings.Count(b.Code, "\n") - 1 }

// fence finds the ```go blocks of a Markdown file (at the start of a line,
// not indented: blocks inside list items are not Go blocks of the page).
var fence = regexp.MustCompile("(?ms)^```go\n(.*?)^```$")

// Extract returns the ```go blocks of md, the contents of Markdown file file.
func Extract(file string, md []byte) []Block {
	var blocks []Block
	for _, m := range fence.FindAllSubmatchIndex(md, -1) {
		blocks = append(blocks, Block{
			File: file,
			Line: bytes.Count(md[:m[2]], []byte("\n")) + 1,
			Code: string(md[m[2]:m[3]]),
		})
	}
	return blocks
}

// Config says where blocks are compiled.
type Config struct {
	// Root is the checkout of Tenure: Markdown files are named relative to
	// it, and the module replaces github.com/tenurehq/tenure with it.
	Root string
	// GoMod and GoSum are the go.mod and go.sum, relative to Root, whose
	// requirements the module takes: "go.mod" and "go.sum" for the core
	// module, or those of a module with more requirements (River's example).
	GoMod, GoSum string
	// Imports maps package names that blocks use to import paths, besides
	// the standard library's, pgx's and Tenure's (see defaultImports).
	Imports map[string]string
	// Modules are other modules of the checkout the blocks import, by module
	// path, each with its folder relative to Root: required and replaced
	// by that folder (the River adapter's guide imports riveradapter).
	Modules map[string]string
	// StandIns are declarations that blocks may use without declaring them,
	// one declaration per element. One that declares a name the block
	// declares itself is left out for that block.
	StandIns []string
}

// defaultImports are the packages that blocks may use without importing
// them. runtime is Tenure's, never the standard library's, and tenureotel is
// Tenure's otel package, as the docs name it.
var defaultImports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "log": "log", "slog": "log/slog",
	"http": "net/http", "os": "os", "signal": "os/signal", "strings": "strings", "sync": "sync",
	"syscall": "syscall", "testing": "testing", "time": "time",
	"pgx": "github.com/jackc/pgx/v5", "pgxpool": "github.com/jackc/pgx/v5/pgxpool", "uuid": "github.com/google/uuid",
	"activities": "github.com/tenurehq/tenure/activities",
	"flow":       "github.com/tenurehq/tenure/flow",
	"policy":     "github.com/tenurehq/tenure/policy",
	"runtime":    "github.com/tenurehq/tenure/runtime",
	"sdk":        "github.com/tenurehq/tenure/sdk",
	"store":      "github.com/tenurehq/tenure/store",
	"tenureotel": "github.com/tenurehq/tenure/otel",
	"tenuretest": "github.com/tenurehq/tenure/tenuretest",
}

// modulePath is the throwaway module's path.
const modulePath = "example.com/docsnippets"

// Check compiles the Go blocks of the Markdown files (paths relative to
// cfg.Root) and vets them, reporting each failure as an error of t that
// starts with the file and line of its block. A file with no Go block is
// an error too: the caller listed it to have its blocks checked.
func Check(t testing.TB, cfg Config, files ...string) {
	t.Helper()
	imports := map[string]string{}
	for name, path := range defaultImports {
		imports[name] = path
	}
	for name, path := range cfg.Imports {
		imports[name] = path
	}
	dir := t.TempDir()
	var all []Block
	for _, file := range files {
		md, err := os.ReadFile(filepath.Join(cfg.Root, file))
		if err != nil {
			t.Fatal(err)
		}
		blocks := Extract(file, md)
		if len(blocks) == 0 {
			t.Errorf("%s: no ```go block to check", file)
		}
		for _, b := range blocks {
			all = append(all, b)
			if formatted, err := format.Source([]byte(b.Code)); err == nil && string(formatted) != b.Code {
				t.Errorf("%s:%d: the block is not gofmt'ed; gofmt has it as:\n%s", b.File, b.Line, formatted)
			}
			pkg := fmt.Sprintf("b_%s_%d", sanitize(b.File), b.Line)
			src, name, err := compose(filepath.Join(cfg.Root, b.File), b, imports)
			if err != nil {
				t.Errorf("%s:%d: %s", b.File, b.Line, strings.ReplaceAll(err.Error(), cfg.Root+string(filepath.Separator), ""))
				continue
			}
			if name != "" { // a file: together with the page's other files of its package
				pkg = fmt.Sprintf("f_%s_%s", sanitize(b.File), strings.TrimSuffix(name, "_test"))
				fileName := fmt.Sprintf("block_%d.go", b.Line)
				if strings.HasSuffix(name, "_test") {
					fileName = fmt.Sprintf("block_%d_test.go", b.Line)
				}
				write(t, filepath.Join(dir, pkg, fileName), src)
				continue
			}
			write(t, filepath.Join(dir, pkg, "block.go"), src)
			standIns, err := standInFile(b, imports, cfg.StandIns)
			if err != nil {
				t.Fatalf("stand-ins: %v", err)
			}
			write(t, filepath.Join(dir, pkg, "standins.go"), standIns)
		}
	}
	if len(all) == 0 {
		return
	}
	writeModule(t, cfg, dir)
	vet := exec.Command("go", "vet", "./...")
	vet.Dir = dir
	// Offline: the module's requirements are those of a module of the
	// checkout, already in the module cache.
	vet.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	out, err := vet.CombinedOutput()
	if err == nil {
		return
	}
	report(t, cfg.Root, all, string(out), err)
}

// compose returns the Go file that compiles block b, read from the Markdown
// file at path, and, when b is a file of its own, its package name.
func compose(path string, b Block, imports map[string]string) (src []byte, pkgName string, err error) {
	directive := fmt.Sprintf("//line %s:%d:1\n", path, b.Line)
	fset := token.NewFileSet()
	if f, err := parser.ParseFile(fset, "", b.Code, parser.PackageClauseOnly); err == nil {
		return []byte(directive + b.Code), f.Name.Name, nil
	}
	decls := "package p\n\n" + directive + b.Code
	f, declErr := parser.ParseFile(fset, "block.go", decls, 0)
	if declErr == nil {
		return withImports(decls, usedPackages(f, imports), imports), "", nil
	}
	body := "package p\n\nfunc _(ctx context.Context) error {\n\treturn func() error {\n" + directive + b.Code
	tail := "\t}()\n}\n"
	f, err = parser.ParseFile(fset, "block.go", body+tail, 0)
	if err != nil {
		return nil, "", fmt.Errorf("the block parses neither as declarations (%v) nor as statements (%v)", declErr, err)
	}
	stmts := f.Decls[0].(*ast.FuncDecl).Body.List[0].(*ast.ReturnStmt).Results[0].(*ast.CallExpr).Fun.(*ast.FuncLit).Body.List
	if len(stmts) == 0 {
		return nil, "", fmt.Errorf("the block has no code")
	}
	if _, ok := stmts[len(stmts)-1].(*ast.ReturnStmt); !ok {
		tail = "\t\treturn nil\n" + tail
	}
	// Use each variable the block declares at its top level, on the line
	// that declares it, so that a fragment may leave them for the reader.
	type use struct {
		at   int
		text string
	}
	var uses []use
	for _, s := range stmts {
		if names := declared(s); len(names) > 0 {
			blanks := strings.TrimSuffix(strings.Repeat("_, ", len(names)), ", ")
			uses = append(uses, use{fset.File(s.End()).Offset(s.End()), "; " + blanks + " = " + strings.Join(names, ", ")})
		}
	}
	for i := len(uses) - 1; i >= 0; i-- {
		body = body[:uses[i].at] + uses[i].text + body[uses[i].at:]
	}
	used := usedPackages(f, imports)
	if !slices.Contains(used, "context") {
		used = append(used, "context")
	}
	return withImports(body+tail, used, imports), "", nil
}

// declared returns the variables a statement declares.
func declared(s ast.Stmt) []string {
	var names []string
	switch s := s.(type) {
	case *ast.AssignStmt:
		if s.Tok == token.DEFINE {
			for _, e := range s.Lhs {
				if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
					names = append(names, id.Name)
				}
			}
		}
	case *ast.DeclStmt:
		if g, ok := s.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, spec := range g.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if id.Name != "_" {
						names = append(names, id.Name)
					}
				}
			}
		}
	}
	return names
}

// usedPackages returns the names of imports that f uses: identifiers
// before a selector that f does not declare.
func usedPackages(f *ast.File, imports map[string]string) []string {
	seen := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Obj == nil && imports[id.Name] != "" {
				seen[id.Name] = true
			}
		}
		return true
	})
	var names []string
	for name := range seen {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// withImports inserts the import declaration of names after src's package
// clause.
func withImports(src string, names []string, imports map[string]string) []byte {
	var decl strings.Builder
	if len(names) > 0 {
		decl.WriteString("import (\n")
		for _, n := range names {
			path := imports[n]
			if filepath.Base(path) == n {
				fmt.Fprintf(&decl, "\t%s\n", strconv.Quote(path))
			} else {
				fmt.Fprintf(&decl, "\t%s %s\n", n, strconv.Quote(path))
			}
		}
		decl.WriteString(")\n\n")
	}
	clause, rest, _ := strings.Cut(src, "\n")
	return []byte(clause + "\n\n" + decl.String() + rest)
}

// standInFile returns the stand-ins for block b: every one that declares
// no name b declares at its top level.
func standInFile(b Block, imports map[string]string, standIns []string) ([]byte, error) {
	fset := token.NewFileSet()
	own := map[string]bool{}
	if f, err := parser.ParseFile(fset, "", "package p\n"+b.Code, parser.SkipObjectResolution); err == nil {
		for _, name := range topLevel(f) {
			own[name] = true
		}
	}
	var src strings.Builder
	src.WriteString("package p\n\n")
	for _, s := range standIns {
		f, err := parser.ParseFile(fset, "", "package p\n"+s, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", s, err)
		}
		if !slices.ContainsFunc(topLevel(f), func(n string) bool { return own[n] }) {
			src.WriteString(s + "\n\n")
		}
	}
	f, err := parser.ParseFile(fset, "standins.go", src.String(), 0)
	if err != nil {
		return nil, err
	}
	return withImports(src.String(), usedPackages(f, imports), imports), nil
}

// topLevel returns the names that f declares in its package block.
func topLevel(f *ast.File) []string {
	var names []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				names = append(names, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, id := range s.Names {
						names = append(names, id.Name)
					}
				case *ast.TypeSpec:
					names = append(names, s.Name.Name)
				}
			}
		}
	}
	return names
}

// writeModule makes dir the module modulePath, with the requirements of
// cfg.GoMod and cfg.GoSum and the checkout in place of Tenure.
func writeModule(t testing.TB, cfg Config, dir string) {
	t.Helper()
	gomod, err := os.ReadFile(filepath.Join(cfg.Root, cfg.GoMod))
	if err != nil {
		t.Fatal(err)
	}
	gosum, err := os.ReadFile(filepath.Join(cfg.Root, cfg.GoSum))
	if err != nil {
		t.Fatal(err)
	}
	mod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(gomod), "module "+modulePath)
	mod = regexp.MustCompile(`(?m)^replace github\.com/tenurehq/tenure => .*$`).ReplaceAllString(mod, "")
	if !strings.Contains(mod, "github.com/tenurehq/tenure v") {
		mod += "\nrequire github.com/tenurehq/tenure v0.0.0\n"
	}
	mod += "\nreplace github.com/tenurehq/tenure => " + cfg.Root + "\n"
	for path, dir := range cfg.Modules {
		mod += "\nrequire " + path + " v0.0.0\nreplace " + path + " => " + filepath.Join(cfg.Root, dir) + "\n"
	}
	write(t, filepath.Join(dir, "go.mod"), []byte(mod))
	write(t, filepath.Join(dir, "go.sum"), gosum)
}

// diagnostic is a position in a Markdown file, as go vet reports it.
var diagnostic = regexp.MustCompile(`(?m)^(?:vet: )?(\S+\.md):(\d+)(?::\d+)?: .*$`)

// report turns go vet's output into one error per block, each starting
// with the block's file and line, and one for what names no block.
func report(t testing.TB, root string, blocks []Block, out string, err error) {
	t.Helper()
	out = strings.ReplaceAll(out, root+string(filepath.Separator), "")
	found := map[int][]string{} // block index: its diagnostics
	var other []string
	last := -1 // the block of the previous diagnostic, which indented lines continue
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := diagnostic.FindStringSubmatch(line)
		switch {
		case m == nil && last >= 0 && strings.HasPrefix(line, "\t"):
			found[last] = append(found[last], line)
			continue
		case m == nil:
			last = -1
			if !strings.HasPrefix(line, "# ") {
				other = append(other, line)
			}
			continue
		}
		n, _ := strconv.Atoi(m[2])
		last = slices.IndexFunc(blocks, func(b Block) bool { return b.File == m[1] && b.Line <= n && n <= b.End()+2 })
		if last < 0 {
			other = append(other, line)
			continue
		}
		found[last] = append(found[last], line)
	}
	for i, b := range blocks {
		if lines := found[i]; len(lines) > 0 {
			t.Errorf("%s:%d: the block does not compile or vet:\n\t%s", b.File, b.Line, strings.Join(lines, "\n\t"))
		}
	}
	if len(other) > 0 || len(found) == 0 {
		t.Errorf("go vet of the blocks: %v\n%s", err, strings.Join(other, "\n"))
	}
}

// sanitize makes a Markdown file's path a part of a Go package name.
func sanitize(path string) string {
	return regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(strings.TrimSuffix(path, ".md"), "_")
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
