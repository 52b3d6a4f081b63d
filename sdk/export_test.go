package sdk

import (
	"time"

	"github.com/google/uuid"
)

// Flushes returns how many batches c's Start calls have been recorded in.
func Flushes(c *Client) int64 { return c.starts.flushes.Load() }

// Pending returns how many Start calls of c wait for a flush.
func Pending(c *Client) int {
	c.starts.mu.Lock()
	defer c.starts.mu.Unlock()
	return len(c.starts.pending)
}

// SetExpectedWait sets how long an expected run's Result waits for its
// notice before it reads.
func SetExpectedWait(c *Client, d time.Duration) { c.expectedWait = d }

// SetListenIdle sets how long c's LISTEN connection outlives its last waiter.
func SetListenIdle(c *Client, d time.Duration) { c.listenIdle = d }

// SetFlushLockWait sets how long c's shared flushes wait for a busy key.
func SetFlushLockWait(c *Client, d time.Duration) {
	c.starts.mu.Lock()
	defer c.starts.mu.Unlock()
	c.starts.lockWait = d
}

// Listening reports whether c's LISTEN is in effect.
func Listening(c *Client) bool {
	c.notices.mu.Lock()
	defer c.notices.mu.Unlock()
	return c.notices.listening && !c.notices.undelivered
}

// Expected reports whether c expects the end notice of run id (see
// notices.expect).
func Expected(c *Client, id uuid.UUID) bool {
	c.notices.mu.Lock()
	defer c.notices.mu.Unlock()
	_, ok := c.notices.expected[id]
	return ok
}
