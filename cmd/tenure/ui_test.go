package main

import (
	"bufio"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/store"
)

// uiProcess is a running tenure ui.
type uiProcess struct {
	cmd    *exec.Cmd
	url    string
	token  string
	stdout []string
}

// startUI starts tenure ui on a free port with args and reads the URL (and
// the generated token) it prints.
func startUI(t *testing.T, schema string, env []string, args ...string) *uiProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--schema", schema, "ui", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(withoutDatabaseURL(os.Environ()), "DATABASE_URL="+pgtest.URL(t)), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &uiProcess{cmd: cmd}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	deadline := time.After(20 * time.Second)
	writes := strings.Contains(strings.Join(args, " "), "--write")
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("tenure ui ended early:\n%s", strings.Join(p.stdout, "\n"))
			}
			p.stdout = append(p.stdout, l)
			if m := regexp.MustCompile(`Tenure UI on (http://\S+)`).FindStringSubmatch(l); m != nil {
				p.url = m[1]
			}
			if tok, ok := strings.CutPrefix(l, "token: "); ok {
				p.token = tok
			}
			done = p.url != "" && (!writes || strings.HasPrefix(l, "log in to write: "))
		case <-deadline:
			t.Fatalf("tenure ui printed no URL:\n%s", strings.Join(p.stdout, "\n"))
		}
	}
	go func() {
		for range lines { // keep draining
		}
	}()
	return p
}

// stop sends SIGINT and expects a clean exit.
func (p *uiProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tenure ui after SIGINT: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tenure ui did not stop on SIGINT")
	}
}

func migrated(t *testing.T) string {
	t.Helper()
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pgtest.Pool(t), store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	return schema
}

// TestCLI_UIServesReadOnlyAndStopsOnSIGINT: tenure ui prints its URL,
// serves the pages, refuses writes, and exits 0 on SIGINT.
func TestCLI_UIServesReadOnlyAndStopsOnSIGINT(t *testing.T) {
	schema := migrated(t)
	p := startUI(t, schema, nil)
	if !strings.HasPrefix(p.url, "http://127.0.0.1:") || !strings.Contains(p.stdout[0], "read-only") {
		t.Fatalf("printed %q", p.stdout)
	}
	for _, page := range []string{"", "failures", "runs", "workers"} {
		resp, err := http.Get(p.url + page)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `<nav>`) {
			t.Fatalf("GET /%s: %d\n%s", page, resp.StatusCode, body)
		}
	}
	resp, err := http.PostForm(p.url+"failures/requeue", url.Values{"workflow": {"x"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST on a read-only UI: %d, want 403", resp.StatusCode)
	}
	p.stop(t)
}

// TestCLI_UIWriteGeneratesAToken: with --write and no token, tenure ui
// prints a generated token and its login link; a write without it is 401,
// and the login link opens a session. TENURE_UI_TOKEN is used when set.
func TestCLI_UIWriteGeneratesAToken(t *testing.T) {
	schema := migrated(t)
	p := startUI(t, schema, nil, "--write")
	if len(p.token) != 32 || !strings.Contains(strings.Join(p.stdout, "\n"), p.url+"login?token="+p.token) {
		t.Fatalf("printed %q", p.stdout)
	}
	resp, err := http.PostForm(p.url+"failures/requeue", url.Values{"workflow": {"x"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST without the token: %d, want 401", resp.StatusCode)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.Get(p.url + "login?token=" + p.token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
		t.Fatalf("login: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	p.stop(t)

	q := startUI(t, schema, []string{"TENURE_UI_TOKEN=from-env"}, "--write")
	if q.token != "" || strings.Contains(strings.Join(q.stdout, "\n"), "from-env") {
		t.Fatalf("a token from the environment is printed: %q", q.stdout)
	}
	resp, err = noRedirect.Get(q.url + "login?token=from-env")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login with TENURE_UI_TOKEN: %d", resp.StatusCode)
	}
	q.stop(t)
}

// TestCLI_UIUsageErrors: a token without --write, an argument, a schema
// that is not migrated.
func TestCLI_UIUsageErrors(t *testing.T) {
	schema := migrated(t)
	expect(t, tenure(t, schema, "ui", "--token", "x"), exitUsage, "--token is for --write")
	expect(t, tenure(t, schema, "ui", "extra"), exitUsage, `unknown command "extra"`)
	expect(t, tenure(t, pgtest.Schema(t), "ui", "--addr", "127.0.0.1:0"), exitSchema, "tenure migrate up")
	expect(t, tenure(t, schema, "ui", "--addr", "256.0.0.1:http"), exitError, "listen on --addr")
}
