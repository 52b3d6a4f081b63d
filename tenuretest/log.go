package tenuretest

import (
	"strings"
	"sync"
)

// testLog writes the worker's log lines to the test's log until the test is
// over: logging after it would panic, and a worker's last words (a run it
// could not hand back in time) may come later.
type testLog struct {
	t      TB
	mu     sync.Mutex
	closed bool
}

// Write logs one line per call: slog's handlers write each record whole.
func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.t.Logf("%s", strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (l *testLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}
