package sdk

import (
	"context"
	"sync"
	"time"
)

// unserved remembers when the client last checked that a live worker serves
// a workflow on a queue, so that Start warns about runs nobody will execute
// at the cost of one read per pair and minute.
type unserved struct {
	mu      sync.Mutex
	checked map[[2]string]time.Time
}

// unservedEvery is how often a client checks one workflow and queue.
const unservedEvery = time.Minute

// warnIfUnserved logs a warning when no live worker (the registry's
// live_workers) serves workflow on queue: the run just started will wait
// until one starts. At most one read per pair per unservedEvery; a failed
// read says nothing.
func (c *Client) warnIfUnserved(ctx context.Context, workflow, queue string) {
	key := [2]string{workflow, queue}
	c.unserved.mu.Lock()
	if c.unserved.checked == nil {
		c.unserved.checked = map[[2]string]time.Time{}
	}
	last, seen := c.unserved.checked[key]
	due := !seen || time.Since(last) >= unservedEvery
	if due {
		c.unserved.checked[key] = time.Now()
	}
	c.unserved.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(c.statementTimeout, time.Second))
	defer cancel()
	served, err := c.store.Served(ctx, workflow, queue)
	if err != nil || served {
		return
	}
	c.logger.Warn("tenure: no live worker serves this workflow on this queue: its runs wait until one starts (tenure workers lists the live ones)",
		"workflow", workflow, "queue", queue)
}
