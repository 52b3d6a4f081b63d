package runtime

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/store"
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
// of one this worker woke claims at once.
func TestListener_AWokenRunIsTheGiversToClaimFirst(t *testing.T) {
	c := &claimer{wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	defer c.stop()
	l := &listener{cfg: &Config{Label: "me"}, claims: c}

	began := time.Now()
	timers := map[*time.Timer]bool{}
	for range 100 {
		l.notified("woke:another")
		c.mu.Lock()
		timers[c.elsewhere] = true
		c.mu.Unlock()
	}
	// One timer per wokeElsewhere at most (one fired while the loop ran, if
	// it was that slow, lets the next notice set another).
	if most := 1 + int(time.Since(began)/wokeElsewhere); len(timers) > most || timers[nil] && len(timers) == 1 {
		t.Fatalf("%d timers for 100 notices of runs others woke within %s, want at most %d", len(timers), time.Since(began), most)
	}
	select {
	case <-c.wake:
		if waited := time.Since(began); waited < wokeElsewhere {
			t.Fatalf("claimed after %s, before wokeElsewhere (%s)", waited, wokeElsewhere)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no claim after the notices of runs others woke")
	}

	c.mu.Lock()
	if c.elsewhere != nil { // (the timer is being reset after it fired)
		c.elsewhere.Stop()
		c.elsewhere = nil
	}
	c.mu.Unlock()
	select {
	case <-c.wake: // a claim signalled by the timer's own firing
	default:
	}
	l.notified("woke:me")
	select {
	case <-c.wake:
	default:
		t.Fatal("a notice of a run this worker woke did not wake its claim loop at once")
	}
	c.mu.Lock()
	armed := c.elsewhere != nil
	c.mu.Unlock()
	if armed {
		t.Fatal("a notice of a run this worker woke set the timer for others' wakes")
	}
}

// The runs a worker's gives wake are announced to it alone only while its
// LISTEN hears notices: from the listener's Delivering until it is Lost
// (or stops, for good behind a transaction pooler or at shutdown), and
// never for a label too long for a notice.
func TestListener_NamesItselfOnlyWhileItHears(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://127.0.0.1:1/unused") // never connects
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st, err := store.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := &claimer{wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	l := &listener{cfg: &Config{Label: "me"}, store: st, claims: c}
	if got := st.WakeTarget(); got != "" || c.hearing.Load() {
		t.Fatalf("before the LISTEN hears anything, wakes are announced to %q, want every worker", got)
	}
	l.delivering()
	if got := st.WakeTarget(); got != "me" || !c.hearing.Load() {
		t.Fatalf("while it hears, wakes are announced to %q (claimer hearing: %t), want me", got, c.hearing.Load())
	}
	l.lost()
	if got := st.WakeTarget(); got != "" || c.hearing.Load() {
		t.Fatalf("once lost, wakes are announced to %q (claimer hearing: %t), want every worker", got, c.hearing.Load())
	}
	l.delivering()
	l.cfg = &Config{Label: strings.Repeat("x", maxWakeLabel+1)}
	l.lost()
	l.delivering()
	if got := st.WakeTarget(); got != "" {
		t.Fatalf("a label of %d bytes is named in wakes (%d bytes), want every worker", maxWakeLabel+1, len(got))
	}
}

// A run's end wakes the claim loop only when a claim may find something:
// the last one filled every free slot or was not made for want of one, or
// the worker does not hear the notices of new runs.
func TestClaimer_ASlotFreedWakesTheClaimsOnlyWhenAClaimMayFindARun(t *testing.T) {
	c := &claimer{wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	woken := func() bool {
		select {
		case <-c.wake:
			return true
		default:
			return false
		}
	}
	for _, tc := range []struct {
		hearing, backlog, want bool
	}{
		{hearing: true, backlog: false, want: false}, // the next run's notice wakes it
		{hearing: true, backlog: true, want: true},
		{hearing: false, backlog: false, want: true}, // no notice would
		{hearing: false, backlog: true, want: true},
	} {
		c.hearing.Store(tc.hearing)
		c.backlog.Store(tc.backlog)
		c.slotFreed()
		if got := woken(); got != tc.want {
			t.Errorf("hearing %t, backlog %t: a slot freed woke the claims: %t, want %t", tc.hearing, tc.backlog, got, tc.want)
		}
	}
}
