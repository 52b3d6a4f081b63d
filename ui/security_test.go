package ui_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/ui"
)

func TestTokenBits_CountsTheAlphabetAndTheLength(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		token string
		bits  int
	}{
		{"", 0},
		{"a", 4},             // a hex digit
		{"s3cret-token", 72}, // base64url: 12 × 6
		{"0123456789", 33},   // digits only
		{"9f86d081884c7d659a2feaa0c55ad015", 128},        // 32 hex digits: what tenure ui generates
		{"9F86D081884C7D659A2FEAA0C55AD015", 128},        // upper-case hex
		{"9f86d081884c7d659a2feaa0c55ad01", 124},         // one digit short
		{"n3X8_qLr0-vBt7KzWm2P4a", 132},                  // 22 characters of base64url
		{"n3X8/qLr0+vBt7KzWm2P4a==", 144},                // base64 with its padding
		{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 4}, // one letter, repeated
		{"abc123abc123abc123abc123abc123abc123", 24},     // "abc123", repeated: 6 hex digits
		{"correct horse battery staple", 183},            // printable ASCII: an upper bound, as said
	} {
		if got := ui.TokenBits(tc.token); got != tc.bits {
			t.Errorf("TokenBits(%q) = %d, want %d", tc.token, got, tc.bits)
		}
	}
}

func TestCheckToken_WarnsBelow128Bits(t *testing.T) {
	t.Parallel()
	err := ui.CheckToken("a")
	if err == nil || !strings.Contains(err.Error(), "at most 4 bits") || !strings.Contains(err.Error(), "--token") {
		t.Fatalf("CheckToken(a) = %v, want a warning naming the flag and the bits", err)
	}
	if err := ui.CheckToken("9f86d081884c7d659a2feaa0c55ad015"); err != nil {
		t.Fatalf("CheckToken of 32 random hex digits: %v", err)
	}
	// New accepts a weak token and logs the warning.
	var log bytes.Buffer
	f := newFixture(t, ui.Config{})
	if _, err := ui.New(ui.Config{Operator: f.op, Writes: true, Token: "a", Logger: slog.New(slog.NewTextHandler(&log, nil))}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "at most 4 bits") {
		t.Fatalf("New with the token a logged %q, want a warning", log.String())
	}
}

func TestListenWarning_ForEveryAddressButLoopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.2:80", "[::1]:8080", "localhost:8080"} {
		if w := ui.ListenWarning(addr); w != "" {
			t.Errorf("ListenWarning(%s) = %q, want none", addr, w)
		}
	}
	for addr, want := range map[string]string{
		"0.0.0.0:8080":     "on every network interface, port 8080 (--addr)",
		"[::]:8080":        "on every network interface, port 8080",
		":8080":            "on every network interface",
		"192.168.1.7:8080": "on 192.168.1.7:8080 (--addr), not a loopback address",
		"ui.example:443":   "not a loopback address",
	} {
		w := ui.ListenWarning(addr)
		if !strings.Contains(w, want) || !strings.Contains(w, "127.0.0.1") || !strings.Contains(w, "--hide-payloads") {
			t.Errorf("ListenWarning(%s) = %q, want it to say %q and what to do", addr, w, want)
		}
	}
}

// A client that guesses the token is answered 429 after 10 wrong guesses,
// before its guess is compared: even the right token waits. Other clients
// are not slowed, and the right token costs no guess.
func TestLogin_GuessesAreThrottledPerClient(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	login := func(client, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/tenure/login?token="+url.QueryEscape(token), nil)
		req.RemoteAddr = client + ":50000"
		return f.do(req)
	}
	for range 20 { // the right token, again and again: never throttled
		if w := login("10.0.0.2", testToken); w.Code != http.StatusSeeOther {
			t.Fatalf("login with the token: %d", w.Code)
		}
	}
	codes := map[int]int{}
	var retry string
	for i := range 200 {
		w := login("10.0.0.1", "guess-"+string(rune('a'+i%26)))
		codes[w.Code]++
		if w.Code == http.StatusTooManyRequests && retry == "" {
			retry = w.Header().Get("Retry-After")
			want(t, w, http.StatusTooManyRequests, `too many wrong tokens from your address: try again in \d+s`)
		}
	}
	if codes[http.StatusForbidden] != 10 || codes[http.StatusTooManyRequests] != 190 {
		t.Fatalf("200 guesses answered %v, want 10 × 403 and then 190 × 429", codes)
	}
	if retry != "6" {
		t.Fatalf("Retry-After %q, want 6 (one guess every 6s)", retry)
	}
	if w := login("10.0.0.1", testToken); w.Code != http.StatusTooManyRequests {
		t.Fatalf("the right token from the throttled client: %d, want 429 (not compared)", w.Code)
	}
	// A script guessing with the bearer token is throttled alike.
	for range 10 {
		if w := f.post("runs/00000000-0000-0000-0000-000000000000/cancel", nil, postOpts{token: "wrong"}); w.Code != http.StatusForbidden {
			t.Fatalf("a wrong bearer token: %d, want 403", w.Code)
		}
	}
	w := f.post("runs/00000000-0000-0000-0000-000000000000/cancel", nil, postOpts{token: "wrong"})
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("the 11th wrong bearer token: %d, Retry-After %q; want 429", w.Code, w.Header().Get("Retry-After"))
	}
	if w := login("10.0.0.3", testToken); w.Code != http.StatusSeeOther {
		t.Fatalf("another client: %d, want it logged in", w.Code)
	}
}

// A page of another site that the operator visits cannot spend the
// operator's guesses (an <img src="http://127.0.0.1:8080/login?token=x">, a
// form posted from elsewhere): a login that the browser says, or whose
// Origin or Referer says, comes from another site is refused before its
// token is counted, so the right token still logs in. Many addresses
// guessing together are held to one budget, and the UI's own machine is
// not held up by them.
func TestLogin_OtherSitesAndManyAddressesCannotLockTheTokenOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	login := func(client, token string, header ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/tenure/login?token="+url.QueryEscape(token), nil)
		req.RemoteAddr = client + ":50000"
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		return f.do(req)
	}
	for _, h := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"}, // another port of 127.0.0.1, another subdomain
		{"Referer", "https://evil.example/page"},
		{"Origin", "https://evil.example"},
		{"Origin", "null"},
	} {
		for range 50 {
			want(t, login("127.0.0.1", "guess", h...), http.StatusForbidden, `login from another site is refused \(and not counted\)`)
		}
	}
	for _, h := range [][]string{{"Sec-Fetch-Site", "none"}, {"Sec-Fetch-Site", "same-origin", "Referer", "http://example.com/tenure/failures"}, nil} {
		if w := login("127.0.0.1", testToken, h...); w.Code != http.StatusSeeOther {
			t.Fatalf("the right token after 250 cross-site guesses, with %v: %d, want it logged in", h, w.Code)
		}
	}

	// 5,000 IPv6 /64s guess once each: 60 guesses are compared, and the
	// others are refused before. The global bucket refills one guess a
	// second while they guess (on a slow machine the loop takes seconds),
	// so each whole second it took allows one more.
	codes := map[int]int{}
	began := time.Now()
	for i := range 5000 {
		codes[login(fmt.Sprintf("2001:db8:%x::1", i), "guess").Code]++
	}
	refilled := int(time.Since(began) / time.Second)
	if n := codes[http.StatusForbidden]; n < 60 || n > 60+refilled || n+codes[http.StatusTooManyRequests] != 5000 {
		t.Fatalf("5,000 addresses' guesses in %v answered %v, want 60 (+ %d refilled) × 403 and the rest 429", time.Since(began), codes, refilled)
	}
	want(t, login("198.51.100.9", testToken), http.StatusTooManyRequests, `too many wrong tokens from many addresses`)
	if w := login("127.0.0.1", testToken); w.Code != http.StatusSeeOther {
		t.Fatalf("the UI's own machine while many addresses guess: %d, want it logged in", w.Code)
	}
}

// The login page posts the token: from this origin it logs in, from
// another it is refused, uncounted.
func TestLogin_ThePageLogsInWithAPost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, writes)
	want(t, f.get("login"), http.StatusOK, `<form method="post" action="login" data-testid="login-form">`, `name="token"`)
	post := func(origin, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/tenure/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		return f.do(req)
	}
	for range 20 {
		want(t, post("https://evil.example", "guess"), http.StatusForbidden, `another site`)
	}
	want(t, post("http://example.com", "wrong"), http.StatusForbidden, `data-testid="error">wrong token<`, `data-testid="login-form"`)
	w := post("http://example.com", testToken)
	if w.Code != http.StatusSeeOther || len(w.Result().Cookies()) == 0 {
		t.Fatalf("login by the form: %d, cookies %v", w.Code, w.Result().Cookies())
	}
}

// The 421 answer to another host name names the flag that allows it.
func TestUI_AnotherHostNameIsRefusedNamingTheFlag(t *testing.T) {
	t.Parallel()
	op := newFixture(t, ui.Config{}).op
	h, err := ui.New(ui.Config{Operator: op, AllowedHosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/failures", nil)
	req.Host = "ops.example:8080"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	body := w.Body.String()
	if w.Code != http.StatusMisdirectedRequest || !strings.Contains(body, `--allowed-host "ops.example"`) || !strings.Contains(body, `"ops.example"`) {
		t.Fatalf("%d %q, want 421 naming --allowed-host ops.example", w.Code, body)
	}
}
