package ui_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/storetest"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/ui"
)

// Failures are grouped by their message with IDs and numbers blanked, but
// an HTTP status code is the cause itself: it is kept (migration 13), and
// only where the number cannot be anything else.
func TestFingerprint_KeepsHTTPStatusCodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	fingerprint := func(msg string) string {
		t.Helper()
		var got string
		if err := f.pool.QueryRow(t.Context(), `SELECT `+f.schema+`.failure_fingerprint($1)`, msg).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for msg, fp := range map[string]string{
		// Kept: after HTTP, status or status code, in any case, and before
		// the code's own reason phrase as net/http writes it.
		"GET https://api.example/v1/charge/4242: 503 Service Unavailable": "GET https://api.example/v<n>/charge/<n>: 503 Service Unavailable",
		"HTTP/1.1 429 Too Many Requests":                                  "HTTP/<n>.<n> 429 Too Many Requests",
		"http 500 from the gateway":                                       "http 500 from the gateway",
		"unexpected status 502 from upstream 10.0.0.7":                    "unexpected status 502 from upstream <n>.<n>.<n>.<n>",
		"status code: 404, order 4242":                                    "status code: 404, order <n>",
		"resp.StatusCode=503":                                             "resp.StatusCode=503",
		"http_status=429 retry_in=30":                                     "http_status=429 retry_in=<n>",
		`{"status":503,"attempt":3}`:                                      `{"status":503,"attempt":<n>}`,
		"got 200 OK, want 201 Created":                                    "got 200 OK, want 201 Created",
		// Blanked: counts and IDs after other words, numbers before a
		// phrase that is not their own, lower-case phrases, a status-like
		// tail of a longer number.
		"upstream returned 503 (request 0a1b2c3d4e5f6071)": "upstream returned <n> (request <hex>)",
		"received 312 bytes":                      "received <n> bytes",
		"got 150 rows":                            "got <n> rows",
		"expected 200 rows, got 199":              "expected <n> rows, got <n>",
		"error 500 in batch 7":                    "error <n> in batch <n>",
		"code 404":                                "code <n>",
		"user 123 not found":                      "user <n> not found",
		"user 123 Not Found":                      "user <n> Not Found",
		"row 423 locked":                          "row <n> locked",
		"file 410 gone":                           "file <n> gone",
		"429 too many requests":                   "<n> too many requests",
		"200 OKAY":                                "<n> OKAY",
		"timeout after 120 ms calling 0xdeadbeef": "timeout after <n> ms calling <hex>",
		"amount 250 must be positive":             "amount <n> must be positive",
		"order 1234503 Service Unavailable":       "order <n> Service Unavailable",
		"charge 17 declined for card 7d3f0c1a-1111-4222-8333-944445555666": "charge <n> declined for card <uuid>",
		"a\x01503 mark": "a<n> mark",
	} {
		if got := fingerprint(msg); got != fp {
			t.Errorf("failure_fingerprint(%q) = %q, want %q", msg, got, fp)
		}
	}
	// Every code net/http names is kept before its own phrase.
	for code := 100; code < 600; code++ {
		if text := http.StatusText(code); text != "" {
			msg := fmt.Sprintf("call 7: %d %s", code, text)
			if got, want := fingerprint(msg), fmt.Sprintf("call <n>: %d %s", code, text); got != want {
				t.Errorf("failure_fingerprint(%q) = %q, want %q", msg, got, want)
			}
		}
	}

	// Two causes of one activity are two groups, each with its code.
	ids := f.fabricate(
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1, Reason: sdk.ReasonRetriesExhausted},
		storetest.Outcome{Workflow: "orders", Activity: "charge", Errors: 1, Reason: sdk.ReasonRetriesExhausted})
	for i, msg := range []string{"POST /charges/981: 503 Service Unavailable", "POST /charges/982: 503 Service Unavailable",
		"POST /charges/983: 502 Bad Gateway"} {
		if _, err := f.pool.Exec(t.Context(), `UPDATE `+f.schema+`.failures SET error_message = $2 WHERE run_id = $1`, ids[i], msg); err != nil {
			t.Fatal(err)
		}
	}
	body := want(t, f.get("failures"), http.StatusOK)
	if n := count(body, `data-testid="failure-group"`); n != 2 {
		t.Fatalf("%d groups, want 2 (503 and 502)", n)
	}
	for _, g := range []string{"POST /charges/&lt;n&gt;: 503 Service Unavailable", "POST /charges/&lt;n&gt;: 502 Bad Gateway"} {
		if !strings.Contains(body, g) {
			t.Errorf("no group %q:\n%s", g, firstLines(body, 80))
		}
	}
}
