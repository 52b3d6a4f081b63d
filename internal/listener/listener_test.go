package listener_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/listener"
	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }

// logs records what a listener logs.
type logs struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *logs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logs) WithGroup(string) slog.Handler      { return l }

// lines returns the messages logged at level, each with its error, if any.
func (l *logs) lines(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if r.Level != level {
			continue
		}
		line := r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" {
				line += " error=" + a.Value.String()
			}
			return true
		})
		out = append(out, line)
	}
	return out
}

// background runs listener.Run until the test ends and returns its error.
func background(t *testing.T, cfg listener.Config) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- listener.Run(ctx, cfg) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func config(t *testing.T, connURL string, l *logs) listener.Config {
	pool := pgtest.Pool(t)
	return listener.Config{
		Channel: "t_" + strings.ReplaceAll(t.Name(), "/", "_"),
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, connURL) },
		Send: func(ctx context.Context, channel, payload string) error {
			_, err := pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
			return err
		},
		Retry: 20 * time.Millisecond, MaxRetry: 400 * time.Millisecond,
		ProbeTimeout: time.Second,
		Logger:       slog.New(l),
		What:         "test notifications", Meanwhile: "polling", Fix: "Connect directly.",
	}
}

// A direct connection passes the probe, and the owner sees every notice
// but the probe's.
func TestRun_DeliversNoticesButNotTheProbe(t *testing.T) {
	t.Parallel()
	var l logs
	cfg := config(t, pgtest.URL(t), &l)
	listening := make(chan struct{}, 10)
	notices := make(chan string, 10)
	cfg.Listening = func() { listening <- struct{}{} }
	cfg.Notify = func(p string) { notices <- p }
	stop := background(t, cfg)
	<-listening
	if _, err := pgtest.Pool(t).Exec(t.Context(), "SELECT pg_notify($1, 'hello')", cfg.Channel); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-notices:
		if p != "hello" {
			t.Fatalf("notice %q, want hello (probes are not the owner's)", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notice")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if w := l.lines(slog.LevelWarn); len(w) != 0 {
		t.Fatalf("warnings on a direct connection: %q", w)
	}
}

// Through pgbouncer in transaction mode LISTEN succeeds but notices never
// arrive: the probe finds out, one warning names the cause and the fix, and
// Run returns so that its owner polls.
func TestRun_ThroughATransactionPoolerWarnsOnceAndGivesUp(t *testing.T) {
	t.Parallel()
	var l logs
	through := pgtest.Pgbouncer(t, pgtest.URL(t), "transaction") + "&default_query_exec_mode=exec"
	cfg := config(t, through, &l)
	began := time.Now()
	err := listener.Run(t.Context(), cfg)
	if !errors.Is(err, listener.ErrNotDelivered) {
		t.Fatalf("Run through a transaction pooler: %v, want ErrNotDelivered", err)
	}
	if took := time.Since(began); took < cfg.ProbeTimeout || took > cfg.ProbeTimeout+5*time.Second {
		t.Errorf("gave up after %s; the probe waits %s", took, cfg.ProbeTimeout)
	}
	w := l.lines(slog.LevelWarn)
	if len(w) != 1 {
		t.Fatalf("warnings %q, want exactly one", w)
	}
	for _, want := range []string{"test notifications do not arrive", "transaction", "pgbouncer", "Connect directly.", "polling"} {
		if !strings.Contains(w[0], want) {
			t.Errorf("warning %q lacks %q", w[0], want)
		}
	}
	t.Logf("the warning reads: %s", w[0])
}

// While the database is unreachable the listener tries again after delays
// that double up to MaxRetry, logs each distinct error once, and says once
// when notices work again; a later loss starts again from Retry.
func TestRun_UnreachableBacksOffAndWarnsOncePerError(t *testing.T) {
	t.Parallel()
	var l logs
	cfg := config(t, pgtest.URL(t), &l)
	// A ceiling far above Retry: a backoff not reset after the new loss
	// below would wait at least a second, where a reset one waits 10 to
	// 20 ms, so that a loaded machine's scheduling (a reconnection took
	// 218 ms in a CI run beside other packages' tests, against a ceiling
	// of 400 ms) cannot be mistaken for either.
	cfg.MaxRetry = 2 * time.Second
	var mu sync.Mutex
	var tries []time.Time
	refused := errors.New("connection refused")
	reset := errors.New("connection reset")
	cfg.Connect = func(ctx context.Context) (*pgx.Conn, error) {
		mu.Lock()
		tries = append(tries, time.Now())
		n := len(tries)
		mu.Unlock()
		switch {
		case n <= 5:
			return nil, refused
		case n <= 7:
			return nil, reset
		}
		return pgx.Connect(ctx, pgtest.URL(t))
	}
	listening := make(chan struct{}, 10)
	cfg.Listening = func() { listening <- struct{}{} }
	background(t, cfg)
	select {
	case <-listening:
	case <-time.After(20 * time.Second):
		t.Fatal("never listening")
	}

	mu.Lock()
	gaps := make([]time.Duration, 0, len(tries))
	for i := 1; i < len(tries); i++ {
		gaps = append(gaps, tries[i].Sub(tries[i-1]))
	}
	mu.Unlock()
	// Delays 20, 40, 80, 160, 320, 640, 1280ms, each jittered to at least half.
	want := []time.Duration{20, 40, 80, 160, 320, 640, 1280}
	for i, g := range gaps {
		if min := want[i] * time.Millisecond / 2; g < min {
			t.Errorf("try %d came %s after the previous; want at least %s (gaps %v)", i+2, g, min, gaps)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); len(l.lines(slog.LevelInfo)) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	warn := l.lines(slog.LevelWarn)
	if len(warn) != 2 || !strings.Contains(warn[0], "connection refused") || !strings.Contains(warn[1], "connection reset") {
		t.Fatalf("warnings %q; want one per distinct error", warn)
	}
	if info := l.lines(slog.LevelInfo); len(info) != 1 || info[0] != "tenure: test notifications work again" {
		t.Fatalf("info lines %q; want one saying notices work again", info)
	}

	// A new loss: the first try comes after Retry again, not MaxRetry.
	var pid int
	if err := pgtest.Pool(t).QueryRow(t.Context(), `SELECT pid FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+pgx.Identifier{cfg.Channel}.Sanitize()).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if _, err := pgtest.Pool(t).Exec(t.Context(), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		t.Fatal("never listening again")
	}
	if took := time.Since(killed); took > cfg.MaxRetry/2 {
		t.Errorf("reconnected %s after the loss; the backoff was not reset to Retry (%s)", took, cfg.Retry)
	}
}
