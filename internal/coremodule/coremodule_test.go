package coremodule_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// root is the core module's directory, seen from this package's.
const root = "../.."

// built are the modules the core may require that end up in the programs of
// people who import Tenure's packages.
var built = map[string]string{
	"github.com/jackc/pgx/v5":         "the PostgreSQL driver",
	"github.com/google/uuid":          "run IDs",
	"go.opentelemetry.io/otel":        "package otel: the OpenTelemetry API (attributes, codes, propagation)",
	"go.opentelemetry.io/otel/metric": "package otel: the metrics API",
	"go.opentelemetry.io/otel/trace":  "package otel: the tracing API",
	"github.com/jackc/pgpassfile":     "required by pgx",
	"github.com/jackc/pgservicefile":  "required by pgx",
	"github.com/jackc/puddle/v2":      "required by pgx (pgxpool)",
	"golang.org/x/sync":               "required by pgx",
	"golang.org/x/text":               "required by pgx",
	"github.com/go-logr/logr":         "required by go.opentelemetry.io/otel",
	"github.com/go-logr/stdr":         "required by go.opentelemetry.io/otel",
	"go.opentelemetry.io/auto/sdk":    "required by go.opentelemetry.io/otel",
	"go.opentelemetry.io/otel/log":    "required by go.opentelemetry.io/otel",
	"github.com/cespare/xxhash/v2":    "required by go.opentelemetry.io/otel/attribute",
}

// tested are the modules the core may require for its own tests only. They
// are in a user's module graph (go.mod files only) but never in a user's
// build: TestPublicPackages_BuildOnlyFromBuiltModules checks that.
var tested = map[string]string{
	"go.opentelemetry.io/otel/sdk":        "otel's tests and ExampleNew record the spans the real SDK makes",
	"go.opentelemetry.io/otel/sdk/metric": "otel's tests read the metrics the real SDK aggregates",
	"golang.org/x/sys":                    "required by go.opentelemetry.io/otel/sdk",
	"go.uber.org/goleak":                  "leak checks of the tests (internal/pgtest)",
	"pgregory.net/rapid":                  "property tests of policy",
}

const advice = "every module the core go.mod requires is in the module graph (go list -m all) " +
	"of every program that imports Tenure. Put the package that needs it in a module of its own, " +
	"as cmd/tenure and examples/workflows/tracing are (a go.mod with " +
	"replace github.com/tenurehq/tenure => <path to the root>, built, vetted and tested by .ci/run); " +
	"if the core itself must have it, add it to internal/coremodule with the reason"

func TestRequirements_AreOnlyTheListedOnes(t *testing.T) {
	var mod struct {
		Module  struct{ Path string }
		Require []struct {
			Path     string
			Version  string
			Indirect bool
		}
	}
	if err := json.Unmarshal(goCommand(t, "mod", "edit", "-json"), &mod); err != nil {
		t.Fatal(err)
	}
	if mod.Module.Path != "github.com/tenurehq/tenure" {
		t.Fatalf("%s/go.mod is module %q, not the core module", root, mod.Module.Path)
	}
	required := map[string]bool{}
	for _, r := range mod.Require {
		required[r.Path] = true
		if built[r.Path] == "" && tested[r.Path] == "" {
			t.Errorf("go.mod requires %s %s, which this test does not list: %s", r.Path, r.Version, advice)
		}
	}
	for _, list := range []map[string]string{built, tested} {
		for path := range list {
			if !required[path] {
				t.Errorf("go.mod no longer requires %s: remove it from internal/coremodule's list", path)
			}
		}
	}
}

func TestPublicPackages_BuildOnlyFromBuiltModules(t *testing.T) {
	var public []string
	for _, line := range lines(goCommand(t, "list", "-f", "{{.ImportPath}} {{.Name}}", "./...")) {
		path, name, _ := strings.Cut(line, " ")
		if name == "main" || strings.Contains(path+"/", "/internal/") {
			continue
		}
		public = append(public, path)
	}
	if !slices.Contains(public, "github.com/tenurehq/tenure/sdk") || !slices.Contains(public, "github.com/tenurehq/tenure/runtime") {
		t.Fatalf("public packages %v lack sdk or runtime", public)
	}
	args := append([]string{"list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}"}, public...)
	modules := lines(goCommand(t, args...))
	slices.Sort(modules)
	for _, m := range slices.Compact(modules) {
		if m == "github.com/tenurehq/tenure" || built[m] != "" {
			continue
		}
		if tested[m] != "" {
			t.Errorf("a public package imports %s, which the core may require for its tests only (%s): "+
				"every user would compile it. Import it from _test.go files or internal test helpers "+
				"(go mod why -m %s says which package does)", m, tested[m], m)
			continue
		}
		t.Errorf("a public package imports %s, which this test does not list: %s", m, advice)
	}
}

// goCommand runs the go command in the core module, outside any workspace.
func goCommand(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func lines(b []byte) []string {
	var out []string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
