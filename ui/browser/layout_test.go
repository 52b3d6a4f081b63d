package browser_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/ui"
)

// longError is what an HTTP client's error looks like: a URL with no space
// to break it at.
const longError = "Post \"https://payments.example.com/v1/charges/ch_3NqLrD2eZvKYlo2C1x9cTq7b/capture?expand%5B%5D=balance_transaction&expand%5B%5D=customer&idempotency_key=order-45-7d3f0c1a9e2b4c6d8f0a1b3c5d7e9f11\": dial tcp 10.20.30.40:443: connect: connection timed out"

// waitingRuns starts a run of each kind of wait: a signal (approve-refund),
// a sleep (nightly-report), a backoff after a failed attempt (check-credit,
// whose bureau answers 503 and whose retry is 10 minutes away, so the
// worker lets the run go until then), and a workflow no worker serves
// (reconcile-ledger). It returns them by name once each is waiting.
func (s *shop) waitingRuns() map[string]uuid.UUID {
	s.t.Helper()
	ctx := s.t.Context()
	out := map[string]uuid.UUID{}
	start := func(name string, f func() (uuid.UUID, error)) {
		id, err := f()
		if err != nil {
			s.t.Fatalf("start %s: %v", name, err)
		}
		out[name] = id
	}
	start("refund", func() (uuid.UUID, error) {
		r, err := sdk.Start(ctx, s.client, s.refund, "refund-81")
		return runID(r, err)
	})
	start("nightly", func() (uuid.UUID, error) {
		r, err := sdk.Start(ctx, s.client, s.nightly, "2026-12-01")
		return runID(r, err)
	})
	start("credit", func() (uuid.UUID, error) {
		r, err := sdk.Start(ctx, s.client, s.credit, "customer-9")
		return runID(r, err)
	})
	start("reconcile", func() (uuid.UUID, error) {
		r, err := sdk.Start(ctx, s.client, s.reconcile, "2026-11-30")
		return runID(r, err)
	})
	deadline := time.Now().Add(30 * time.Second)
	for name, id := range out {
		for {
			r, err := s.op.Run(ctx, id)
			if err != nil {
				s.t.Fatal(err)
			}
			waits := r.Status == record.RunQueued && (r.WaitingFor != "" || r.RunAfter.After(time.Now().Add(time.Minute)) || name == "reconcile")
			if waits {
				break
			}
			if time.Now().After(deadline) {
				s.t.Fatalf("run %s (%s) is %s, waiting for %q, not waiting after 30s", name, id, r.Status, r.WaitingFor)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return out
}

func runID(r *sdk.Run[string], err error) (uuid.UUID, error) {
	if err != nil {
		return uuid.Nil, err
	}
	return r.ID, nil
}

// TestUI_EveryPageFitsTheScreenAndEveryWaitingRunSaysWhy: at 1280×800, in
// read-only and in write mode, no page scrolls sideways, however long an
// error, and no chart label is cut; run IDs take one short line and copy
// whole; every queued run says what it waits for.
func TestUI_EveryPageFitsTheScreenAndEveryWaitingRunSaysWhy(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	for _, o := range []order{{"order-45", 300, "XTS"}, {"order-46", 0, "EUR"}, {"order-47", 800, "EUR"}, {"order-48", 700, "XTS"}} {
		if _, err := s.order(o); err != nil && !errors.As(err, new(*sdk.RunError)) {
			t.Fatalf("order %s: %v", o.ID, err)
		}
	}
	failed, err := s.op.RunByKey(t.Context(), "order-45")
	if err != nil {
		t.Fatal(err)
	}
	// An error no line break fits: the failure's, the run's, the attempt's.
	for _, stmt := range []string{
		`UPDATE {schema}.failures SET error_message = $2 WHERE run_id = $1`,
		`UPDATE {schema}.runs SET error_message = $2 WHERE id = $1`,
		`UPDATE {schema}.attempts SET error_message = $2 WHERE run_id = $1 AND step = 2`,
	} {
		if _, err := s.pool.Exec(t.Context(), strings.ReplaceAll(stmt, "{schema}", pgx.Identifier{s.schema}.Sanitize()), failed.ID, longError); err != nil {
			t.Fatal(err)
		}
	}
	waiting := s.waitingRuns()

	pages := []string{"failures", "failures?workflow=checkout", "runs", "runs/" + failed.ID.String(), "workers", "downstreams",
		"policy?run=" + failed.ID.String() + "&step=2"}
	for _, id := range waiting {
		pages = append(pages, "runs/"+id.String())
	}
	for _, writes := range []bool{false, true} {
		mode := "read-only"
		b := s.browseWith(ui.Config{})
		if writes {
			mode = "write mode"
			b = s.browse()
		}
		for _, p := range pages {
			b.open(p)
			b.fits(p + " (" + mode + ")")
		}
		b.loadStatus("a page that does not exist", 404, chromedp.Navigate(b.base+"nothing-here"))
		b.fits("the page that does not exist (" + mode + ")")
		if writes {
			b.open("failures")
			b.follow(bulkRequeue)
			b.fits("the requeue preview")
			b.open("failures")
			b.follow(`[data-testid="purge"]`)
			b.fits("the purge preview")
			b.open("runs/" + waiting["refund"].String())
			b.follow(`[data-testid="cancel"]`)
			b.fits("the cancel confirmation")
		}
	}

	b := s.browseWith(ui.Config{})
	// Run IDs: eight characters on one line, the whole ID on hover and in
	// what a selection copies.
	b.open("runs")
	ids := eval[[]map[string]any](b, "measure the run IDs", `Array.from(document.querySelectorAll('a[data-testid="run-link"]'), a => {
		const r = a.getBoundingClientRect();
		getSelection().removeAllRanges();
		const range = document.createRange(); range.selectNodeContents(a); getSelection().addRange(range);
		return {text: a.textContent, title: a.title, copied: getSelection().toString(), width: r.width, height: r.height,
		        row: a.closest('tr').getBoundingClientRect().height};
	})`)
	if len(ids) < 8 {
		t.Fatalf("%d runs listed, want every run of the shop", len(ids))
	}
	for _, id := range ids {
		full, _ := id["title"].(string)
		if _, err := uuid.Parse(full); err != nil || id["text"] != full || id["copied"] != full {
			t.Errorf("run link %v: want its title, text and copy the whole ID", id)
		}
		if w, _ := id["width"].(float64); w > 90 {
			t.Errorf("run ID %s is %.0f px wide, want about 8 characters", full, w)
		}
		if h, _ := id["row"].(float64); h > 40 {
			t.Errorf("the row of run %s is %.0f px high: its cells wrap", full, h)
		}
	}
	b.screenshot("runs")

	// What each queued run waits for.
	for name, want := range map[string][]string{
		"refund":    {"signal approved (step 1), no timeout"},
		"nightly":   {"sleep (step 1) until", "(in 5h)"},
		"credit":    {"backoff until", "attempt 1 of step 1 credit-bureau failed (credit bureau: 503 Service Unavailable), delay 10m0s (policy)"},
		"reconcile": {"a free worker: due since", "no live worker serves reconcile-ledger on queue default: it waits until one starts"},
	} {
		b.open("runs/" + waiting[name].String())
		got := b.text(`[data-testid="waiting-for"]`)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("the %s run waits for %q, want it to say %q", name, got, w)
			}
		}
		if name == "credit" {
			b.screenshot("run-waiting")
		}
	}
}

// TestUI_DarkModeFollowsTheSystem: a reader whose system prefers dark gets
// dark pages, charts included, and the timeline's legend shows the colours
// the timeline uses, in either scheme.
func TestUI_DarkModeFollowsTheSystem(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	for _, o := range []order{{"order-50", 1500, "XTS"}, {"order-51", 900, "XTS"}, {"order-52", 0, "EUR"}} {
		if _, err := s.order(o); err == nil {
			t.Fatalf("order %s succeeded", o.ID)
		}
	}
	failed, err := s.op.RunByKey(t.Context(), "order-50")
	if err != nil {
		t.Fatal(err)
	}
	b := s.browse()
	for _, scheme := range []string{"light", "dark"} {
		b.colorScheme(scheme)
		b.open("failures")
		bg := eval[string](b, "read the background", `getComputedStyle(document.body).backgroundColor`)
		fg := eval[string](b, "read the text colour", `getComputedStyle(document.querySelector('main')).color`)
		if dark := bg == "rgb(18, 22, 30)"; dark != (scheme == "dark") {
			t.Errorf("%s scheme: the page's background is %s, text %s", scheme, bg, fg)
		}
		if scheme == "dark" {
			b.screenshot("failures-dark")
		}
		b.open("runs/" + failed.ID.String())
		b.waitFor(timeline)
		// Each legend swatch is drawn with the class of what it names: the
		// same fill (or stroke) as that element of the timeline.
		mismatch := eval[[]string](b, "compare the legend with the timeline", `(() => {
			const bad = [];
			const paint = e => { const s = getComputedStyle(e); return e.tagName === 'line' ? s.stroke : s.fill; };
			for (const sw of document.querySelectorAll('[data-testid="legend-item"] svg > *')) {
				const cls = sw.getAttribute('class');
				const p = paint(sw);
				if (!p || p === 'none' || p === 'rgb(0, 0, 0)') bad.push(cls + ': no colour (' + p + ')');
				const drawn = cls && document.querySelector('svg[data-testid="timeline"] .' + cls.split(' ').join('.'));
				if (drawn && paint(drawn) !== p) bad.push(cls + ': legend ' + p + ', timeline ' + paint(drawn));
			}
			return bad;
		})()`)
		if len(mismatch) > 0 {
			t.Errorf("%s scheme: the legend does not show the timeline's colours: %q", scheme, mismatch)
		}
		if n := len(b.texts(`[data-testid="legend-item"]`)); n < 3 {
			t.Errorf("%s scheme: the legend has %d entries", scheme, n)
		}
		b.fits("the run page (" + scheme + ")")
		if scheme == "dark" {
			b.screenshot("run-dark")
		}
	}
}

// TestUI_GuessesAreThrottledAndOtherHostsRefused: a browser that guesses the
// token is stopped after ten wrong ones and told when to try again; a page
// asked for under a host name the UI does not serve names the flag that
// allows it.
func TestUI_GuessesAreThrottledAndOtherHostsRefused(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	b := s.browseWith(ui.Config{Writes: true, Token: token})
	for i := range 10 {
		b.loadStatus("wrong token", 403, chromedp.Navigate(b.base+"login?token=guess-"+string(rune('a'+i))))
	}
	b.loadStatus("the 11th wrong token", 429, chromedp.Navigate(b.base+"login?token=guess-k"))
	if got := b.text(`[data-testid="error"]`); !regexp.MustCompile(`^too many wrong tokens from your address: try again in [1-6]s`).MatchString(got) {
		t.Fatalf("the 11th guess reads %q", got)
	}
	b.loadStatus("the right token while throttled", 429, chromedp.Navigate(b.base+"login?token="+token))

	// The UI answers 127.0.0.1 only under the names it is given.
	c := s.browseWith(ui.Config{AllowedHosts: []string{"localhost"}})
	c.loadStatus("another host name", 421, chromedp.Navigate(c.base+"failures"))
	if got := c.bodyText(); !strings.Contains(got, `--allowed-host "127.0.0.1"`) {
		t.Fatalf("the 421 page reads %q, want it to name --allowed-host", got)
	}
}
