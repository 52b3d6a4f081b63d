package browser_test

import (
	"net/http"
	"net/http/httptest"

	"github.com/tenurehq/tenure/ui"
)

// token is what the test's UI asks of a write.
const token = "t0p-secret-for-the-browser-test"

// browse serves the shop's UI with writes enabled, mounted under /tenure/ as
// a host application would mount it, opens it in a new browser, and logs
// that browser in with the token; the server and the browser stop when the
// test ends.
func (s *shop) browse() *browser {
	s.t.Helper()
	h, err := ui.New(ui.Config{Operator: s.op, Writes: true, Token: token})
	if err != nil {
		s.t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/tenure/", http.StripPrefix("/tenure", h))
	srv := httptest.NewServer(mux)
	s.t.Cleanup(srv.Close)
	b := newBrowser(s.t, srv.URL+"/tenure/")
	b.open("login?token=" + token)
	return b
}
