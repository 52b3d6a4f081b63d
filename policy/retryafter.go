package policy

import (
	"errors"
	"net/http"
	"strings"
	"time"
)

// MaxHeaderRetryAfter is where ParseRetryAfter saturates: a header asking for
// a longer wait, in seconds or as a far-future date, parses as this value
// instead of overflowing. Decide then clamps it further by MaxRetryAfter.
const MaxHeaderRetryAfter = 365 * 24 * time.Hour

// RetryAfterer is implemented by errors that carry a hint of how long to
// wait before the next attempt, such as an HTTP 429 or 503 response with a
// Retry-After header. Decide uses the hint instead of the computed delay,
// clamped by MaxRetryAfter and the deadline. Negative hints are ignored.
type RetryAfterer interface {
	RetryAfter() time.Duration
}

// MaxRetryAfter caps how long a Retry-After hint may make the step wait: a
// longer hint waits d. d must be at least 0; 0 ignores hints, so delays
// always come from the backoff.
func MaxRetryAfter(d time.Duration) Option {
	return func(r *Retry) { r.MaxRetryAfter = d }
}

// WithRetryAfter wraps err with a hint to wait d before the next attempt.
// The result keeps err's message, and errors.Is and errors.As still see err.
// WithRetryAfter(nil, d) is nil.
func WithRetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, delay: d}
}

// retryAfterError is the wrapper made by WithRetryAfter.
type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e *retryAfterError) Error() string             { return e.err.Error() }
func (e *retryAfterError) Unwrap() error             { return e.err }
func (e *retryAfterError) RetryAfter() time.Duration { return e.delay }

// RetryAfterOf returns the hint of the first error in err's chain that
// implements RetryAfterer. ok is false when there is none or its hint is
// negative.
func RetryAfterOf(err error) (d time.Duration, ok bool) {
	var ra RetryAfterer
	if !errors.As(err, &ra) {
		return 0, false
	}
	d = ra.RetryAfter()
	if d < 0 {
		return 0, false
	}
	return d, true
}

// ParseRetryAfter parses the value of an HTTP Retry-After header (RFC 9110,
// section 10.2.3): either delta-seconds, a string of ASCII digits, or an
// HTTP-date in any format http.ParseTime accepts, which is turned into a
// delay from now. Surrounding spaces and tabs are ignored.
//
// ok is false for an empty or malformed value, including signs, fractions and
// negative numbers. A date in the past gives 0 (retry now). Values beyond
// MaxHeaderRetryAfter give MaxHeaderRetryAfter; no input overflows.
func ParseRetryAfter(header string, now time.Time) (d time.Duration, ok bool) {
	v := strings.Trim(header, " \t")
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		const limit = int64(MaxHeaderRetryAfter / time.Second)
		var secs int64
		for i := 0; i < len(v); i++ {
			secs = secs*10 + int64(v[i]-'0')
			if secs > limit {
				return MaxHeaderRetryAfter, true
			}
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	// Sub saturates at the Duration limits, so far dates cannot overflow.
	return min(max(t.Sub(now), 0), MaxHeaderRetryAfter), true
}

// RetryAfterFromResponse parses resp's Retry-After header with
// ParseRetryAfter, whatever the status code. ok is false when resp is nil or
// has no valid header.
func RetryAfterFromResponse(resp *http.Response, now time.Time) (d time.Duration, ok bool) {
	if resp == nil {
		return 0, false
	}
	return ParseRetryAfter(resp.Header.Get("Retry-After"), now)
}

// isDigits reports whether s is a non-empty string of ASCII digits.
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
