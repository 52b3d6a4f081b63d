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

// A notice of a run another worker's give woke ("woke:<label>") sets one
// claim wokeElsewhere later, however many notices come meanwhile; a notice
// of one this worker woke claims at once, marked as its own (the claim
// then announces the run to every worker if it does not take it).
func TestListener_AWokenRunIsTheGiversToClaimFirst(t *testing.T) {
	c := &claimer{wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	defer c.stop()
	l := &listener{cfg: &Config{Label: "me"}, claims: c}

	began := time.Now()
	l.notified("woke:another")
	c.mu.Lock()
	armed := c.elsewhere
	c.mu.Unlock()
	for range 100 {
		l.notified("woke:another")
	}
	c.mu.Lock()
	same := c.elsewhere == armed && armed != nil
	c.mu.Unlock()
	if !same {
		t.Fatal("the notices of runs others woke set more than one timer, or none")
	}
	if c.ownWake.Load() {
		t.Fatal("a notice of a run another worker woke marked as this worker's")
	}
	select {
	case <-c.wake:
		if waited := time.Since(began); waited < wokeElsewhere {
			t.Fatalf("claimed after %s, before wokeElsewhere (%s)", waited, wokeElsewhere)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no claim after the notices of runs others woke")
	}

	l.notified("woke:me")
	select {
	case <-c.wake:
	default:
		t.Fatal("a notice of a run this worker woke did not wake its claim loop at once")
	}
	if !c.ownWake.Load() {
		t.Fatal("a notice of a run this worker woke not marked as its own")
	}
}
