package browser_test

import (
	"net/http"
	"net/http/httptest"

	"github.com/tenurehq/tenure/ui"
)

// token is what the test's UI asks of a write: 32 hex digits, 128 bits.
const token = "5e1f0c3a9b7d24e68f0a1c3e5b7d9f21"

// browse serves the shop's UI with writes enabled, mounted under /tenure/ as
// a host application would mount it, opens it in a new browser, and logs
// that browser in with the token; the server and the browser stop when the
// test ends.
func (s *shop) browse() *browser {
	s.t.Helper()
	b := s.browseWith(ui.Config{Writes: true, Token: token})
	b.open("login?token=" + token)
	return b
}

// browseWith serves the shop's UI with cfg (its Operator set to the
// shop's), mounted under /tenure/, and opens it in a new browser, not
// logged in.
func (s *shop) browseWith(cfg ui.Config) *browser {
	s.t.Helper()
	cfg.Operator = s.op
	h, err := ui.New(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/tenure/", http.StripPrefix("/tenure", h))
	srv := httptest.NewServer(mux)
	s.t.Cleanup(srv.Close)
	return newBrowser(s.t, srv.URL+"/tenure/")
}
