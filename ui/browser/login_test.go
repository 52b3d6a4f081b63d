package browser_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tenurehq/tenure/ui"
)

// TestUI_AnotherSiteCannotSpendTheOperatorsGuesses: a page of another site
// that the operator's browser opens, with 30 images pointing at the UI's
// login with wrong tokens, spends none of the operator's guesses: the
// link tenure ui printed still logs in. The login page's form logs in too.
func TestUI_AnotherSiteCannotSpendTheOperatorsGuesses(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	b := s.browseWith(ui.Config{Writes: true, Token: token})
	var imgs strings.Builder
	for i := range 30 {
		fmt.Fprintf(&imgs, `<img src="%slogin?token=guess-%d" alt="">`, b.base, i)
	}
	// Another site: 127.0.0.2, where the UI is 127.0.0.1.
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	evil := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><title>cat pictures</title>%s", imgs.String())
	}))
	evil.Listener.Close()
	evil.Listener = l
	evil.Start()
	t.Cleanup(evil.Close)
	b.load("open another site's page", chromedp.Navigate(evil.URL))
	if n := eval[int](b, "count the images that failed", `Array.from(document.images).filter(i => i.complete && i.naturalWidth === 0).length`); n != 30 {
		t.Fatalf("%d of the 30 images were answered", n)
	}
	b.open("login?token=" + token) // the link tenure ui printed: 200 once redirected, not 429
	if got := b.location(); !strings.HasSuffix(got, "/tenure/") {
		t.Fatalf("logged in, the browser is at %s, want the failures page", got)
	}

	c := s.browseWith(ui.Config{Writes: true, Token: token})
	c.open("login")
	c.fill(`[data-testid="login-token"]`, token)
	c.follow(`[data-testid="login-submit"]`)
	if got := c.location(); !strings.HasSuffix(got, "/tenure/") {
		t.Fatalf("logged in by the form, the browser is at %s, want the failures page", got)
	}
}
