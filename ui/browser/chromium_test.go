package browser_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// chromiumInstall is what a machine without a browser needs.
const chromiumInstall = "apt-get install -y chromium chromium-driver"

// actionTimeout bounds one step of a page (a navigation, a click, a read):
// the pages are server-rendered from a local database, so a step that takes
// longer is a hang, not a slow machine.
const actionTimeout = 20 * time.Second

// chromiumPath finds the browser: $CHROMIUM when it is set, else the names
// that Debian's chromium package and Google's builds install.
func chromiumPath() (string, error) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("$CHROMIUM=%s: %w", p, err)
		}
		return p, nil
	}
	names := []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "/usr/lib/chromium/chromium"}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("none of %s is on PATH", strings.Join(names, ", "))
}

// browser is one headless Chromium with one tab, open on the UI at base.
// Its methods fail the test when a step fails, naming the page.
type browser struct {
	t    *testing.T
	tab  context.Context
	base string // the UI's URL, ending in "/"
}

// newBrowser starts a headless Chromium with a profile of its own and
// closes it when the test ends. The browser reaches only base's host: every
// other host name resolves to nothing, so no page and no background service
// of Chromium can fetch from outside (127.0.0.2 is reachable too: it plays
// another site, on this machine). A machine without Chromium, or one
// where it does not start, fails the test with what to install.
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	path, err := chromiumPath()
	if err != nil {
		t.Fatalf("no Chromium to drive the UI with: %v; install it: %s", err, chromiumInstall)
	}
	output := &lockedBuffer{}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true), // Chromium refuses to run as root with its sandbox
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE 127.0.0.2"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
		chromedp.CombinedOutput(output),
	)
	tab, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		// Close the browser gracefully, then wait for its process.
		ctx, cancel := context.WithTimeout(tab, 10*time.Second)
		defer cancel()
		if err := chromedp.Cancel(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("close Chromium: %v", err)
		}
		cancelTab()
		cancelAlloc()
	})

	// The first Do starts the browser and binds its life to tab, so it has
	// no timeout of its own; a browser that cannot start exits, and Do
	// returns.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(tab) }()
	select {
	case err = <-started:
	case <-time.After(time.Minute):
		cancelTab()
		err = <-started
		err = fmt.Errorf("no answer in a minute (%v)", err)
	}
	if err != nil {
		t.Fatalf("start Chromium (%s): %v\n%s\nIs it installed and working? %s", path, err, output.String(), chromiumInstall)
	}
	return &browser{t: t, tab: tab, base: base}
}

// do runs steps on the tab, bounded by actionTimeout; what names them in
// the failure.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v (page %s)", what, err, b.location())
	}
}

// run runs one action that returns a value, as do does.
func run[T any](b *browser, what string, action chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, actionTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	if err != nil {
		b.t.Fatalf("%s: %v (page %s)", what, err, b.location())
	}
	return v
}

// load runs steps that make the tab load a page (a navigation, a click on a
// link or a submit button), waits until the page has loaded, and fails the
// test unless the server answered 200 OK: an error page is not the page the
// engineer asked for.
func (b *browser) load(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, actionTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		b.t.Fatalf("%s: %v (page %s)", what, err, b.location())
	}
	if resp == nil {
		b.t.Fatalf("%s: no page loaded (page %s)", what, b.location())
	}
	if resp.Status != 200 {
		b.t.Fatalf("%s: %s answered %d %s:\n%s", what, resp.URL, resp.Status, resp.StatusText, b.bodyText())
	}
}

// loadStatus is load for a page that must answer status, not 200: an
// error page the engineer is meant to see.
func (b *browser) loadStatus(what string, status int, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, actionTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		b.t.Fatalf("%s: %v (page %s)", what, err, b.location())
	}
	if resp == nil || resp.Status != int64(status) {
		got := "no page"
		if resp != nil {
			got = fmt.Sprint(resp.Status)
		}
		b.t.Fatalf("%s: answered %s, want %d:\n%s", what, got, status, b.bodyText())
	}
}

// open navigates to path, relative to the UI's base URL.
func (b *browser) open(path string) {
	b.t.Helper()
	b.load("open "+path, chromedp.Navigate(b.base+path))
}

// follow clicks what sel selects and waits for the page it loads.
func (b *browser) follow(sel string) {
	b.t.Helper()
	b.load("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// followNav clicks the link of the page's <nav> whose text is name.
func (b *browser) followNav(name string) {
	b.t.Helper()
	b.followLink(fmt.Sprintf(`//nav//a[normalize-space(.)=%q]`, name))
}

// followLink clicks the link the XPath expression selects and waits for the
// page it loads.
func (b *browser) followLink(xpath string) {
	b.t.Helper()
	b.load("click "+xpath, chromedp.Click(chromedp.Search(xpath), chromedp.NodeVisible))
}

// checkNav fails the test unless the page's <nav> links to every page an
// engineer moves between.
func (b *browser) checkNav() {
	b.t.Helper()
	links := b.texts("nav a")
	for _, want := range []string{"Failures", "Runs", "Workers", "Downstreams"} {
		if !slices.Contains(links, want) {
			b.t.Errorf("page %s: the nav links %q, without %s", b.location(), links, want)
		}
	}
}

// waitFor waits until the page has a visible element sel selects.
func (b *browser) waitFor(sel string) {
	b.t.Helper()
	b.do("wait for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
}

// fill types text into the field sel selects.
func (b *browser) fill(sel, text string) {
	b.t.Helper()
	b.do("type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), text, chromedp.NodeVisible))
}

// text returns the visible text of the first element sel selects, waiting
// for one to be visible.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(run(b, "read "+sel, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible)))
}

// texts returns the text of every element sel selects, without waiting: a
// page is complete when it has loaded, so none is none.
func (b *browser) texts(sel string) []string {
	b.t.Helper()
	return run(b, "read every "+sel, chromedp.Evaluate[[]string](fmt.Sprintf(
		`Array.from(document.querySelectorAll(%q), e => e.innerText.trim())`, sel)))
}

// has reports whether the page has an element sel selects, without waiting.
func (b *browser) has(sel string) bool {
	b.t.Helper()
	return run(b, "look for "+sel, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q) !== null`, sel)))
}

// bodyText is the page's text, for failure messages.
func (b *browser) bodyText() string {
	ctx, cancel := context.WithTimeout(b.tab, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return fmt.Sprintf("(no text: %v)", err)
	}
	return s
}

// location is the tab's URL, for failure messages.
func (b *browser) location() string {
	ctx, cancel := context.WithTimeout(b.tab, 5*time.Second)
	defer cancel()
	u, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return fmt.Sprintf("unknown: %v", err)
	}
	return u
}

// screenshot saves the whole page, not only what the window shows, as
// docs/ui/<name>.png: docs/ui.md shows them, and every run writes them
// again so that they show today's pages.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png := run(b, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// screenshotDir is docs/ui of the checkout, seen from this module.
const screenshotDir = "../../docs/ui"

// lockedBuffer collects Chromium's output, which its own goroutine writes,
// for the message of a browser that does not start.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// fits fails the test when the page is wider than the window, so that it
// would scroll sideways, naming the elements that stick out; and when a
// label of one of its charts runs past the chart's edge.
func (b *browser) fits(page string) {
	b.t.Helper()
	w := run(b, "measure "+page, chromedp.Evaluate[[]int](
		`[document.documentElement.scrollWidth, document.documentElement.clientWidth]`))
	if w[0] > w[1] {
		out := run(b, "find what sticks out of "+page, chromedp.Evaluate[[]string](`(() => {
			const right = document.documentElement.clientWidth;
			return Array.from(document.querySelectorAll('body *'))
				.filter(e => e.getBoundingClientRect().right > right + 0.5)
				.slice(0, 8)
				.map(e => e.tagName.toLowerCase() + (e.className && e.className.baseVal === undefined ? '.' + e.className : '') +
					' ' + Math.round(e.getBoundingClientRect().right) + 'px: ' + (e.innerText || e.textContent || '').slice(0, 60));
		})()`))
		b.t.Errorf("%s is %d px wide in a window of %d: it scrolls sideways; sticking out:\n%s", page, w[0], w[1], strings.Join(out, "\n"))
	}
	cut := run(b, "look for cut labels on "+page, chromedp.Evaluate[[]string](`(() => {
		const cut = [];
		for (const svg of document.querySelectorAll('svg[viewBox]')) {
			const vb = svg.viewBox.baseVal;
			for (const t of svg.querySelectorAll('text')) {
				const r = t.getBBox();
				if (r.x < -0.5 || r.x + r.width > vb.width + 0.5) cut.push(t.textContent + ' at ' + Math.round(r.x) + '..' + Math.round(r.x + r.width) + ' of ' + vb.width);
			}
		}
		return cut;
	})()`))
	if len(cut) > 0 {
		b.t.Errorf("%s: labels cut by their chart's edge: %q", page, cut)
	}
}

// colorScheme makes the page's prefers-color-scheme the one given ("dark",
// "light"), as the system setting of a reader would.
func (b *browser) colorScheme(scheme string) {
	b.t.Helper()
	b.do("prefer a "+scheme+" colour scheme", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return err
	}))
}

// eval evaluates a JavaScript expression on the page.
func eval[T any](b *browser, what, js string) T {
	b.t.Helper()
	return run(b, what, chromedp.Evaluate[T](js))
}
