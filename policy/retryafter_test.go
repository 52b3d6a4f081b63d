package policy_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tenurehq/tenure/policy"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, time.March, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header string
		want   time.Duration
		ok     bool
	}{
		{"delta seconds", "120", 2 * time.Minute, true},
		{"zero", "0", 0, true},
		{"leading zeros", "0007", 7 * time.Second, true},
		{"surrounding whitespace", " \t30 ", 30 * time.Second, true},
		{"IMF-fixdate", "Sat, 01 Mar 2025 12:01:30 GMT", 90 * time.Second, true},
		{"obsolete RFC 850 date", "Saturday, 01-Mar-25 12:00:10 GMT", 10 * time.Second, true},
		{"obsolete asctime date", "Sat Mar  1 12:00:05 2025", 5 * time.Second, true},
		{"date in the past means now", "Fri, 28 Feb 2025 12:00:00 GMT", 0, true},
		{"date equal to now", "Sat, 01 Mar 2025 12:00:00 GMT", 0, true},
		{"far-future date saturates", "Fri, 31 Dec 9999 23:59:59 GMT", policy.MaxHeaderRetryAfter, true},
		{"huge delta saturates", "999999999999999999999999999999", policy.MaxHeaderRetryAfter, true},
		{"delta just above the limit saturates", fmt.Sprint(int64(policy.MaxHeaderRetryAfter/time.Second) + 1), policy.MaxHeaderRetryAfter, true},
		{"delta at the limit", fmt.Sprint(int64(policy.MaxHeaderRetryAfter / time.Second)), policy.MaxHeaderRetryAfter, true},
		{"empty", "", 0, false},
		{"blank", "   ", 0, false},
		{"negative", "-5", 0, false},
		{"plus sign", "+5", 0, false},
		{"fraction", "1.5", 0, false},
		{"hex", "0x10", 0, false},
		{"unit suffix", "10s", 0, false},
		{"inner space", "1 0", 0, false},
		{"garbage", "soon", 0, false},
		{"non-ASCII digits", "١٢", 0, false},
		{"date without zone", "2025-03-01T12:01:00", 0, false},
		{"invalid date", "Sat, 32 Mar 2025 12:00:00 GMT", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := policy.ParseRetryAfter(tt.header, now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseRetryAfter(%q) = %s, %t; want %s, %t", tt.header, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "-1", "99999999999999999999", "Sat, 01 Mar 2025 12:01:30 GMT", "x"} {
		f.Add(s)
	}
	now := time.Date(2025, time.March, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := policy.ParseRetryAfter(s, now)
		if d < 0 || d > policy.MaxHeaderRetryAfter || (!ok && d != 0) {
			t.Errorf("ParseRetryAfter(%q) = %s, %t", s, d, ok)
		}
	})
}

func TestRetryAfterFromResponse(t *testing.T) {
	now := time.Date(2025, time.March, 1, 12, 0, 0, 0, time.UTC)
	resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
	resp.Header.Set("Retry-After", "42")
	if d, ok := policy.RetryAfterFromResponse(resp, now); d != 42*time.Second || !ok {
		t.Errorf("RetryAfterFromResponse = %s, %t; want 42s, true", d, ok)
	}
	if _, ok := policy.RetryAfterFromResponse(&http.Response{}, now); ok {
		t.Error("response without header: ok")
	}
	if _, ok := policy.RetryAfterFromResponse(nil, now); ok {
		t.Error("nil response: ok")
	}
}

func TestWithRetryAfter(t *testing.T) {
	if policy.WithRetryAfter(nil, time.Second) != nil {
		t.Error("WithRetryAfter(nil) != nil")
	}
	err := fmt.Errorf("fetch: %w", policy.WithRetryAfter(errTransient, 3*time.Second))
	if d, ok := policy.RetryAfterOf(err); d != 3*time.Second || !ok {
		t.Errorf("RetryAfterOf = %s, %t; want 3s, true", d, ok)
	}
	if !errors.Is(err, errTransient) || err.Error() != "fetch: connection reset" {
		t.Errorf("wrapper changed the error: %v", err)
	}
	if _, ok := policy.RetryAfterOf(errTransient); ok {
		t.Error("RetryAfterOf(plain error): ok")
	}
	if _, ok := policy.RetryAfterOf(nil); ok {
		t.Error("RetryAfterOf(nil): ok")
	}
	if _, ok := policy.RetryAfterOf(policy.WithRetryAfter(errTransient, -time.Second)); ok {
		t.Error("negative hint: ok")
	}
	if d, ok := policy.RetryAfterOf(&RateLimitError{Wait: time.Minute}); d != time.Minute || !ok {
		t.Errorf("RetryAfterOf(custom RetryAfterer) = %s, %t", d, ok)
	}
}
