package runtime

import (
	"testing"
	"time"
)

// A backlog of parked runs costs one timer per wakeBucket of the time
// ahead, not one per run; each fires no sooner than the times it covers.
func TestClaimer_WakeTimesShareATimerPerBucket(t *testing.T) {
	c := &claimer{wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	defer c.stop()
	for i := range 1000 {
		c.wakeWithin(time.Minute+time.Duration(i)*time.Microsecond, throttleWakeWithin) // 1 ms of due times
	}
	c.wakeWithin(throttleWakeWithin+time.Second, throttleWakeWithin) // beyond: left to the poll
	c.mu.Lock()
	n := len(c.timers)
	c.mu.Unlock()
	if n < 1 || n > 2 {
		t.Fatalf("%d timers for 1,000 due times within 1 ms, want 1 (2 across a bucket's end)", n)
	}

	began := time.Now()
	c.wakeWithin(20*time.Millisecond, throttleWakeWithin)
	select {
	case <-c.wake:
		if waited := time.Since(began); waited < 20*time.Millisecond {
			t.Fatalf("woken after %s, before the due time of 20ms", waited)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by a due time 20ms ahead")
	}
}
