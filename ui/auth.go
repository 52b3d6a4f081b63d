package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// The cookies of the UI, scoped to the path it is mounted at.
const (
	csrfCookie    = "tenure_csrf"
	sessionCookie = "tenure_session"
	csrfField     = "csrf"
)

// writeFunc is a write action, called once the request is allowed, with
// who is acting (for the audit note).
type writeFunc func(w http.ResponseWriter, r *http.Request, who string)

// write guards a write action: writes enabled (403 otherwise), the caller
// authenticated by Authorize or the Token (401 without credentials, 403
// with wrong ones, 429 once a client has guessed wrong too often: see
// throttle.go), the request from a page of this host (Origin, or Referer)
// and carrying the session's CSRF token (403 otherwise).
func (h *handler) write(next writeFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.cfg.Writes {
			h.fail(w, r, http.StatusForbidden, "Read-only", errors.New("this UI is read-only: start it with writes enabled (tenure ui --write) to requeue, purge, cancel, change a downstream's limits or breaker, or pause, resume or trigger a schedule"))
			return
		}
		_, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		bearer = bearer && h.cfg.Authorize == nil
		if bearer && !h.guess(w, r, "Not allowed") {
			return // out of guesses: the token is not even compared
		}
		who, status, err := h.authenticate(r)
		if err != nil {
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="tenure"`)
			}
			h.fail(w, r, status, "Not allowed", err)
			return
		}
		if bearer {
			h.guesses.refund(clientOf(r)) // the right token costs no guess
		}
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, "Bad request", err)
			return
		}
		if h.cfg.Authorize == nil && strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			// A script with the token: a browser never sends this header
			// on its own, so no other site can make it: no CSRF to fear.
			next(w, r, who)
			return
		}
		if err := sameOrigin(r); err != nil {
			h.fail(w, r, http.StatusForbidden, "Cross-site request refused", err)
			return
		}
		if !h.csrfValid(r) {
			h.fail(w, r, http.StatusForbidden, "Cross-site request refused", errors.New("missing or wrong CSRF token: reload the page and try again"))
			return
		}
		next(w, r, who)
	}
}

// authenticate says who makes a write request, or why not.
func (h *handler) authenticate(r *http.Request) (who string, status int, err error) {
	if h.cfg.Authorize != nil {
		who, ok := h.cfg.Authorize(r)
		if !ok {
			return "", http.StatusForbidden, errors.New("the application refused this action")
		}
		if who == "" {
			who = "unknown"
		}
		return who, 0, nil
	}
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		if !equal(bearer, h.cfg.Token) {
			return "", http.StatusForbidden, errors.New("wrong token")
		}
		return "token", 0, nil
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return "", http.StatusUnauthorized, errors.New("write actions need the token: log in (the login page, or the link tenure ui printed) once, or send Authorization: Bearer …")
	}
	if !equal(c.Value, h.session()) {
		return "", http.StatusForbidden, errors.New("wrong or stale session: log in again")
	}
	return "token", 0, nil
}

// session is the session cookie's value for the token: a MAC of it, so the
// cookie is not the token itself.
func (h *handler) session() string {
	m := hmac.New(sha256.New, []byte(h.cfg.Token))
	m.Write([]byte("tenure ui session"))
	return hex.EncodeToString(m.Sum(nil))
}

// loginPage is the Data of the login page: a form that posts the token,
// and why the last attempt failed.
type loginPage struct {
	Status  int
	Message string
}

// login checks the token, from the login form (a POST of this origin) or
// the link tenure ui prints (login?token=…, opened from outside the
// browser or from the UI's own pages), and sets the session cookie, then
// sends the browser to the failures page without the token in its URL. An
// attempt from another site (an <img> or a form of a page the operator
// visits) is refused before its token is counted or compared, so that no
// page can spend the operator's guesses and lock the right token out;
// wrong tokens are throttled (throttle.go). Without a token it shows the
// form.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.Writes || h.cfg.Authorize != nil {
		redirect(w, "./")
		return
	}
	if err := crossSite(r); err != nil {
		h.fail(w, r, http.StatusForbidden, "Log in", err)
		return
	}
	token := r.URL.Query().Get("token")
	if r.Method == http.MethodPost {
		token = r.PostFormValue("token")
	}
	if token == "" {
		h.render(w, r, http.StatusOK, "login", page{Title: "Log in", Data: loginPage{}})
		return
	}
	if !h.guess(w, r, "Log in") {
		return // out of guesses: the token is not even compared
	}
	if !equal(token, h.cfg.Token) {
		h.render(w, r, http.StatusForbidden, "login", page{Title: "Log in", Data: loginPage{Status: http.StatusForbidden, Message: "wrong token"}})
		return
	}
	h.guesses.refund(clientOf(r))
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: h.session(), Path: prefix(r),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Cache-Control", "no-store")
	redirect(w, "./")
}

// csrfToken returns the session's CSRF token, setting the cookie that holds
// it when the request brought none (double-submit: a form carries it in a
// hidden field, and only pages of this origin can read it to do so).
func (h *handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		return c.Value
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	v := hex.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: prefix(r),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return v
}

// csrfValid compares the form's CSRF token with the cookie's, in constant
// time.
func (h *handler) csrfValid(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) != 64 {
		return false
	}
	return equal(r.PostFormValue(csrfField), c.Value)
}

// crossSite refuses a login attempt that another site's page made the
// browser send: by the browser's own word (Sec-Fetch-Site, which pages
// cannot set: cross-site, or same-site, another port or subdomain), or by
// an Origin (null too: a sandboxed page) or a Referer of another host. A
// link opened from outside the browser (Sec-Fetch-Site: none), from the
// UI's own pages, or by a script, which sends none of them, passes.
func crossSite(r *http.Request) error {
	refused := errors.New("a login from another site is refused (and not counted): open the link tenure ui printed from the address bar or a terminal, or log in on the login page")
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return refused
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); o == "null" || err != nil || !ownHost(r, u.Host) {
			return refused
		}
	}
	if ref := r.Header.Get("Referer"); ref != "" {
		if u, err := url.Parse(ref); err != nil || !ownHost(r, u.Host) {
			return refused
		}
	}
	return nil
}

// ownHost reports whether host is the one the request came to (or the
// first X-Forwarded-Host a proxy set).
func ownHost(r *http.Request, host string) bool {
	hosts := []string{r.Host}
	if fwd := r.Header.Get("X-Forwarded-Host"); fwd != "" { // set by a proxy in front, not by a page
		hosts = append(hosts, strings.TrimSpace(strings.Split(fwd, ",")[0]))
	}
	for _, h := range hosts {
		if host != "" && strings.EqualFold(host, h) {
			return true
		}
	}
	return false
}

// sameOrigin requires the Origin header (or, without one, the Referer) to
// name the host the request was sent to: a form on another site cannot
// post here even with the cookies.
func sameOrigin(r *http.Request) error {
	src := r.Header.Get("Origin")
	if src == "" || src == "null" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return errors.New("the request names no Origin or Referer: write actions are taken from the UI's own pages")
	}
	u, err := url.Parse(src)
	if err != nil || u.Host == "" {
		return errors.New("unreadable Origin or Referer")
	}
	if ownHost(r, u.Host) {
		return nil
	}
	return errors.New("the request comes from " + u.Host + ", not from this UI's host")
}

// equal compares two secrets in constant time.
func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// auditNote is the note recorded in audit_log for a write by who.
func auditNote(who, note string) string {
	note = strings.TrimSpace(note)
	if note == "" {
		return "ui:" + who
	}
	return "ui:" + who + ": " + note
}
