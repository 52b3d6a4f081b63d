package snippets_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/tenuretest"
)

// A private cluster that tenuretest.URL may start is stopped when the tests end.
func TestMain(m *testing.M) { os.Exit(tenuretest.Main(m)) }

// fenced is a fenced block of a Markdown page, with the section it is in.
type fenced struct {
	section string // the "## " heading above it
	lang    string // "sh", "go", or "" for output
	line    int    // of its first line of code, from 1
	code    string
}

var (
	heading = regexp.MustCompile(`(?m)^## (.*)$`)
	fences  = regexp.MustCompile("(?ms)^```(\\w*)\n(.*?)^```$")
	// uuids are run IDs, which differ from run to run.
	uuids = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	// stamps are the date and time log.Fatal writes.
	stamps = regexp.MustCompile(`(?m)^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d `)
)

// fencedBlocks returns the fenced blocks of md in order, each with its
// section.
func fencedBlocks(md string) []fenced {
	var out []fenced
	for _, m := range fences.FindAllStringSubmatchIndex(md, -1) {
		section := ""
		for _, h := range heading.FindAllStringSubmatch(md[:m[0]], -1) {
			section = h[1]
		}
		out = append(out, fenced{
			section: section,
			lang:    md[m[2]:m[3]],
			line:    strings.Count(md[:m[4]], "\n") + 1,
			code:    md[m[4]:m[5]],
		})
	}
	return out
}

// TestDocs_GettingStartedFromAnEmptyFolder follows docs/getting-started.md from
// step 2 on, as a user does, in a new folder outside the repository: it runs
// each ```sh block with bash, in order, in the folder the previous one left
// (the `git clone` of the page is the one command it stands in for, by a
// link to this checkout, so that the page builds today's code), saves the
// page's program as main.go where the page says so, and compares what
// `go run .` prints with the output the page shows. It then runs the
// program without DATABASE_URL, which must stop as the page says, and the
// CLI commands of step 4 on the run the program made.
//
// The program gets a database of its own on the test server: it writes to
// the default schema. `go mod tidy` resolves the new module's requirements
// as it does for a user, through GOPROXY.
func TestDocs_GettingStartedFromAnEmptyFolder(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(root, "docs/getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := fencedBlocks(string(md))

	// Step 1 names the database the sample output shows.
	var pageURL string
	for _, b := range blocks {
		if m := regexp.MustCompile(`(?m)^export DATABASE_URL='([^']+)'$`).FindStringSubmatch(b.code); b.lang == "sh" && m != nil {
			pageURL = m[1]
		}
	}
	if pageURL == "" {
		t.Fatal("docs/getting-started.md: step 1 exports no DATABASE_URL")
	}

	dbURL := freshDatabase(t)
	work := t.TempDir()
	if strings.HasPrefix(work, root+string(filepath.Separator)) {
		t.Fatalf("%s is inside the repository: the module must be a new one", work)
	}
	bin := filepath.Join(work, "bin") // go install's GOBIN, on PATH
	env := append(withoutEnv(os.Environ(), "DATABASE_URL", "GOBIN", "PATH", "GOWORK"),
		"DATABASE_URL="+dbURL, "GOBIN="+bin, "PATH="+bin+string(filepath.ListSeparator)+os.Getenv("PATH"),
		"GOWORK=off", "TENURE_CHECKOUT="+root)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	cwd := filepath.Join(work, ".cwd") // where the previous block left the shell
	if err := os.WriteFile(cwd, []byte(work), 0o644); err != nil {
		t.Fatal(err)
	}
	// sh runs a block as bash runs it, from where the previous one ended.
	sh := func(b fenced, env []string) (stdout, stderr string, err error) {
		script := `set -euo pipefail
# The page's clone, of the repository this test checks out.
git() {
	if [ "$#" = 2 ] && [ "$1" = clone ] && [ "$2" = https://github.com/tenurehq/tenure.git ]; then
		ln -s "$TENURE_CHECKOUT" tenure
	else
		echo "the test stands in for git clone https://github.com/tenurehq/tenure.git only, not: git $*" >&2
		return 1
	fi
}
cd "$(cat ` + cwd + `)"
` + b.code + `pwd > ` + cwd + "\n"
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Env = env
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err = cmd.Run()
		return o.String(), e.String(), err
	}

	var (
		started bool   // past step 1
		saved   bool   // main.go written
		runID   string // the run go run . made
		pageID  string // the run ID of the page's sample output
		ran     string // what the last sh block printed
		cli     bool   // the CLI block ran
	)
	for i, b := range blocks {
		if strings.HasPrefix(b.section, "2.") {
			started = true
		}
		if !started || strings.HasPrefix(b.section, "Next") {
			continue
		}
		where := fmt.Sprintf("docs/getting-started.md:%d", b.line)
		switch {
		case b.lang == "go" && strings.HasPrefix(b.code, "package main\n"):
			dir, err := os.ReadFile(cwd)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(strings.TrimSpace(string(dir)), "main.go"), []byte(b.code), 0o644); err != nil {
				t.Fatal(err)
			}
			saved = true

		case b.lang == "sh":
			if pageID != "" && runID != "" {
				b.code = strings.ReplaceAll(b.code, pageID, runID) // "give it your run's ID"
			}
			out, errOut, err := sh(b, env)
			if err != nil {
				t.Fatalf("%s: the block fails: %v\n%s\nstdout:\n%s\nstderr:\n%s", where, err, b.code, out, errOut)
			}
			t.Logf("%s:\n%s%s", where, out, errOut)
			ran = out
			if strings.Contains(b.code, "tenure runs list") {
				cli = true
				if runID == "" || !strings.Contains(out, runID) {
					t.Errorf("%s: the CLI does not list the run %s:\n%s", where, runID, out)
				}
			}

		case b.lang == "" && strings.Contains(b.code, "DATABASE_URL is not set"):
			// Without DATABASE_URL: the program stops before it connects.
			if !saved {
				t.Fatalf("%s: shown before the program", where)
			}
			noURL := blocks[i]
			noURL.code = "go run .\n"
			out, errOut, err := sh(noURL, withoutEnv(env, "DATABASE_URL"))
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Errorf("%s: without DATABASE_URL, go run . ends with %v, want exit status 1", where, err)
			}
			got := stamps.ReplaceAllString(out+errOut, "")
			if want := stamps.ReplaceAllString(b.code, ""); got != want {
				t.Errorf("%s: without DATABASE_URL the program prints\n%s\nwant\n%s", where, got, want)
			}

		case b.lang == "":
			// The output of the sh block before it, go run . in step 3.
			if runID != "" || ran == "" {
				t.Fatalf("%s: an output block that follows no go run .", where)
			}
			pageID = uuids.FindString(b.code)
			runID = uuids.FindString(ran)
			want := strings.Replace(b.code, connection(t, pageURL), connection(t, dbURL), 1)
			if got, want := normalize(ran), normalize(want); got != want {
				t.Errorf("%s: go run . prints\n%s\nthe page shows (for this test's database)\n%s", where, got, want)
			}
		}
	}
	if !saved || runID == "" || !cli {
		t.Errorf("the page's steps: program saved %v, run %q, CLI run %v; want all three", saved, runID, cli)
	}
}

// connection is what the page's program prints of a DATABASE_URL.
func connection(t *testing.T, dsn string) string {
	t.Helper()
	c, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("database %s on %s:%d as %s", c.Database, c.Host, c.Port, c.User)
}

// normalize makes run IDs alike and drops the spaces that end lines.
func normalize(s string) string {
	lines := strings.Split(strings.TrimRight(uuids.ReplaceAllString(s, "<run ID>"), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// freshDatabase creates a database of the test's own on the test server,
// dropped when the test ends, and returns its URL.
func freshDatabase(t *testing.T) string {
	t.Helper()
	base := tenuretest.URL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("the test database's URL: %v", err)
	}
	name := fmt.Sprintf("getting_started_%d", time.Now().UnixNano())
	exec := func(ctx context.Context, sql string) error {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// withoutEnv returns env without the variables named.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			keep = keep && name != n
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}
