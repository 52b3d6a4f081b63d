package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// trouble follows the database errors of one of the worker's paths to the
// database (claims, the heartbeat, the runs' writes): while they fail, each
// distinct error is logged once per interval, not once per try, and the end
// of the trouble once; Health reports it meanwhile.
type trouble struct {
	path     string // "claim runs", "renew leases", "write runs"
	interval time.Duration
	log      *slog.Logger
	observe  func(path string, err error) // a metric per error; nil for none

	mu     sync.Mutex
	since  time.Time // the first error since the last success; zero when fine
	last   error
	errors int64
	logged map[string]time.Time // error text -> when it was last logged
}

func newTrouble(path string, interval time.Duration, log *slog.Logger, observe func(string, error)) *trouble {
	return &trouble{path: path, interval: interval, log: log, observe: observe, logged: map[string]time.Time{}}
}

// failed records an error of the path and logs it unless the same error was
// logged less than an interval ago. attrs are added to the log line.
func (t *trouble) failed(err error, attrs ...any) {
	if t.observe != nil {
		t.observe(t.path, err)
	}
	now := time.Now()
	t.mu.Lock()
	if t.since.IsZero() {
		t.since = now
	}
	t.last = err
	t.errors++
	text := err.Error()
	at, seen := t.logged[text]
	log := !seen || now.Sub(at) >= t.interval
	if log {
		t.logged[text] = now
	}
	n, since := t.errors, t.since
	t.mu.Unlock()
	if log {
		args := append([]any{"error", err, "errors", n, "failing_for", now.Sub(since).Round(time.Millisecond)}, attrs...)
		t.log.Error("tenure: "+t.path+" failed; retrying with backoff", args...)
	}
}

// ok records a success of the path, and logs the end of the trouble once.
func (t *trouble) ok() {
	t.mu.Lock()
	if t.since.IsZero() {
		t.mu.Unlock()
		return
	}
	since, n, last := t.since, t.errors, t.last
	t.since, t.last, t.errors = time.Time{}, nil, 0
	clear(t.logged)
	t.mu.Unlock()
	t.log.Info("tenure: "+t.path+" works again", "failed_for", time.Since(since).Round(time.Millisecond), "errors", n, "last_error", last)
}

// state is the path's trouble: nil when its last try succeeded.
func (t *trouble) state() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.since.IsZero() {
		return nil
	}
	return fmt.Errorf("%s: failing since %s (%d errors): %w", t.path, t.since.Format(time.RFC3339), t.errors, t.last)
}

// backoff is an exponential delay between tries: from min, doubling, up to
// max.
type backoff struct {
	min, max, next time.Duration
}

func newBackoff(lo, hi time.Duration) *backoff {
	return &backoff{min: lo, max: max(lo, hi)}
}

// delay returns the wait before the next try, and doubles the one after.
func (b *backoff) delay() time.Duration {
	if b.next == 0 {
		b.next = b.min
	}
	d := b.next
	b.next = min(b.next*2, b.max)
	return d
}

// reset starts again from min, after a success.
func (b *backoff) reset() { b.next = 0 }

// sleep waits d, or until ctx ends or stop is closed (nil: never); it
// reports whether the wait was complete.
func sleep(ctx context.Context, d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}

// sqlState is the SQLSTATE of a database error, or "" for an error that did
// not come from the server (a connection lost, a deadline).
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
