package apisurface_test

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the core module's directory, seen from this package's.
const root = "../.."

const golden = "testdata/api.txt"

var update = flag.Bool("update", false, "rewrite "+golden+" with the current API")

// pkg is one public package, parsed without its tests.
type pkg struct {
	dir   string // relative to root, slash-separated: "sdk", "operator"
	files []*ast.File
}

// publicPackages parses every directory of the core module that holds a
// public, non-main package: outside internal/ and testdata/, not in a
// nested module (a directory with a go.mod of its own).
func publicPackages(t *testing.T) []pkg {
	t.Helper()
	var out []pkg
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if rel != "." && (name == "internal" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && rel != "." {
			return filepath.SkipDir
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		var files []*ast.File
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(p, n), nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			if f.Name.Name == "main" {
				return nil
			}
			files = append(files, f)
		}
		if len(files) > 0 && rel != "." {
			out = append(out, pkg{dir: rel, files: files})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// exported lists a package's exported names, one per line: "sdk func Start",
// "sdk method Client.Cancel", "record type Run", and the exported fields of
// its struct types with their types, "record field Run.ID uuid.UUID", so
// that a field added, removed or retyped shows in the list.
func (p pkg) exported() []string {
	var out []string
	add := func(kind, name string) { out = append(out, p.dir+" "+kind+" "+name) }
	for _, f := range p.files {
		imports := importPaths(f)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					add("func", d.Name.Name)
				} else if recv := receiver(d); ast.IsExported(recv) {
					add("method", recv+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if s.Assign.IsValid() {
							add("type", s.Name.Name+" = "+exprString(s.Type, imports))
						} else {
							add("type", s.Name.Name)
						}
						if st, ok := s.Type.(*ast.StructType); ok && !s.Assign.IsValid() {
							for _, field := range st.Fields.List {
								ty := typeString(field.Type)
								for _, n := range field.Names {
									if n.IsExported() {
										add("field", s.Name.Name+"."+n.Name+" "+ty)
									}
								}
								if len(field.Names) == 0 && ast.IsExported(embeddedName(field.Type)) {
									add("field", s.Name.Name+"."+embeddedName(field.Type)+" "+ty+" (embedded)")
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								add(d.Tok.String(), n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestPublicAPI_AliasesNoInternalType keeps every exported type of a public
// package a type of its own or an alias of another public one: an alias of
// an internal type (type Run = store.Run) shows no fields in go doc and
// none in the list, so its fields would change unseen. Records are package
// record's, which internal packages alias instead.
func TestPublicAPI_AliasesNoInternalType(t *testing.T) {
	for _, p := range publicPackages(t) {
		for _, f := range p.files {
			imports := importPaths(f)
			for _, decl := range f.Decls {
				d, ok := decl.(*ast.GenDecl)
				if !ok {
					continue
				}
				for _, spec := range d.Specs {
					s, ok := spec.(*ast.TypeSpec)
					if !ok || !s.Name.IsExported() || !s.Assign.IsValid() {
						continue
					}
					ast.Inspect(s.Type, func(n ast.Node) bool {
						sel, ok := n.(*ast.SelectorExpr)
						if !ok {
							return true
						}
						if x, ok := sel.X.(*ast.Ident); ok && strings.Contains(imports[x.Name]+"/", "/internal/") {
							t.Errorf("%s: type %s is an alias of %s.%s, a type of an internal package: "+
								"define it in a public package (record, for a record) and alias that from internal/",
								p.dir, s.Name.Name, imports[x.Name], sel.Sel.Name)
						}
						return true
					})
				}
			}
		}
	}
}

// TestPublicAPI_IsTheListedOne compares the exported names of the public
// packages with testdata/api.txt.
func TestPublicAPI_IsTheListedOne(t *testing.T) {
	var got []string
	for _, p := range publicPackages(t) {
		got = append(got, p.exported()...)
	}
	if *update {
		if err := os.WriteFile(golden, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(string(b)), "\n")
	var added, removed []string
	for _, g := range got {
		if !slices.Contains(want, g) {
			added = append(added, g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			removed = append(removed, w)
		}
	}
	if len(added)+len(removed) > 0 {
		t.Errorf("the public API differs from internal/apisurface/%s.\n"+
			"Exported by accident? Unexport it or move it under internal/.\n"+
			"On purpose? Run go test ./internal/apisurface -update and commit the list with the change.\n"+
			"added:%s\nremoved:%s", golden, lines(added), lines(removed))
	}
}

// TestPublicAPI_EveryExportedNameIsDocumented requires a doc comment on every
// exported declaration (a grouped const or var may share its group's).
func TestPublicAPI_EveryExportedNameIsDocumented(t *testing.T) {
	for _, p := range publicPackages(t) {
		for _, f := range p.files {
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if d.Name.IsExported() && (d.Recv == nil || ast.IsExported(receiver(d))) && d.Doc == nil {
						t.Errorf("%s: %s has no doc comment", p.dir, d.Name.Name)
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() && s.Doc == nil && d.Doc == nil {
								t.Errorf("%s: type %s has no doc comment", p.dir, s.Name.Name)
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() && s.Doc == nil && d.Doc == nil && s.Comment == nil {
									t.Errorf("%s: %s %s has no doc comment", p.dir, d.Tok, n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestPublicAPI_SignaturesNameNoInternalType keeps the types of internal
// packages out of exported function signatures and struct fields: a user
// could not name them. Alias declarations (type T = internal.T) are how a
// public package gives such a type a public name.
func TestPublicAPI_SignaturesNameNoInternalType(t *testing.T) {
	for _, p := range publicPackages(t) {
		for _, f := range p.files {
			internal := map[string]bool{}
			for name, ip := range importPaths(f) {
				if strings.Contains(ip+"/", "/internal/") {
					internal[name] = true
				}
			}
			if len(internal) == 0 {
				continue
			}
			check := func(what string, n ast.Node) {
				ast.Inspect(n, func(n ast.Node) bool {
					if sel, ok := n.(*ast.SelectorExpr); ok {
						if x, ok := sel.X.(*ast.Ident); ok && internal[x.Name] {
							t.Errorf("%s: %s names %s.%s, a type of an internal package: "+
								"give it a public name (an alias) or keep it unexported", p.dir, what, x.Name, sel.Sel.Name)
						}
					}
					return true
				})
			}
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if d.Name.IsExported() && (d.Recv == nil || ast.IsExported(receiver(d))) {
						check(d.Name.Name, d.Type)
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						s, ok := spec.(*ast.TypeSpec)
						if !ok || !s.Name.IsExported() || s.Assign.IsValid() {
							continue
						}
						switch ty := s.Type.(type) {
						case *ast.StructType:
							for _, field := range ty.Fields.List {
								for _, n := range field.Names {
									if n.IsExported() {
										check(s.Name.Name+"."+n.Name, field.Type)
									}
								}
								if len(field.Names) == 0 {
									check(s.Name.Name+" (embedded)", field.Type)
								}
							}
						default:
							check(s.Name.Name, s.Type)
						}
					}
				}
			}
		}
	}
}

// lines prints names one per line, indented, or " none".
func lines(names []string) string {
	if len(names) == 0 {
		return " none"
	}
	return "\n\t" + strings.Join(names, "\n\t")
}

// receiver is the name of a method's receiver type, without * or type
// parameters.
func receiver(d *ast.FuncDecl) string {
	ty := d.Recv.List[0].Type
	if s, ok := ty.(*ast.StarExpr); ok {
		ty = s.X
	}
	switch x := ty.(type) {
	case *ast.IndexExpr:
		ty = x.X
	case *ast.IndexListExpr:
		ty = x.X
	}
	if id, ok := ty.(*ast.Ident); ok {
		return id.Name
	}
	return fmt.Sprint(ty)
}

// module is the core module's path, trimmed from import paths in the list.
const module = "github.com/tenurehq/tenure/"

// importPaths maps a file's import names to their paths.
func importPaths(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, imp := range f.Imports {
		ip, _ := strconv.Unquote(imp.Path.Value)
		name := path.Base(ip)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		m[name] = ip
	}
	return m
}

// typeString prints a field's type as written: "uuid.UUID", "*time.Time",
// "func(done, total int)".
func typeString(e ast.Expr) string {
	var b strings.Builder
	if err := printer.Fprint(&b, token.NewFileSet(), e); err != nil {
		return fmt.Sprintf("%T", e)
	}
	return b.String()
}

// embeddedName is the type name of an embedded field: T, *T, pkg.T.
func embeddedName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	}
	return ""
}

// exprString prints the short expressions of alias declarations, with the
// package's path ("internal/store.Run"), so that the list says what is
// aliased.
func exprString(e ast.Expr, imports map[string]string) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok && imports[id.Name] != "" {
			return strings.TrimPrefix(imports[id.Name], module) + "." + x.Sel.Name
		}
		return exprString(x.X, imports) + "." + x.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(x.X, imports)
	}
	return fmt.Sprintf("%T", e)
}
