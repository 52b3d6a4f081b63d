package ui

import (
	"fmt"
	"testing"
	"time"
)

// A client's guesses come back one every guessEvery, up to guessBurst.
func TestThrottle_RefillsOneGuessEverySixSeconds(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	th := newThrottle(func() time.Time { return now })
	for i := range guessBurst {
		if ok, _ := th.take("a", true); !ok {
			t.Fatalf("guess %d refused", i+1)
		}
	}
	ok, no := th.take("a", true)
	if ok || no.retry != guessEvery || !no.first || no.global {
		t.Fatalf("guess 11: ok %v, %+v; want refused for 6s, first refusal, the client's own bucket", ok, no)
	}
	if _, no := th.take("a", true); no.first {
		t.Fatal("the second refusal in a row is logged again")
	}
	now = now.Add(3 * time.Second)
	if ok, no := th.take("a", true); ok || no.retry != 3*time.Second {
		t.Fatalf("3s later: ok %v, retry %s; want refused for 3s more", ok, no.retry)
	}
	now = now.Add(3 * time.Second)
	if ok, _ := th.take("a", true); !ok {
		t.Fatal("6s later: refused, want one guess back")
	}
	if ok, _ := th.take("a", true); ok {
		t.Fatal("only one guess came back in 6s")
	}
	now = now.Add(time.Hour)
	for i := range guessBurst {
		if ok, _ := th.take("a", true); !ok {
			t.Fatalf("an hour later, guess %d refused: the bucket holds %d", i+1, guessBurst)
		}
	}
	if ok, _ := th.take("a", true); ok {
		t.Fatal("the bucket refilled past its burst")
	}
}

// Many addresses together guess no faster than the global bucket allows,
// whatever their number; the loopback address is held up by its own bucket
// alone; a right token gives both guesses back.
func TestThrottle_AllAddressesTogetherGuessSixtyAMinute(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	th := newThrottle(func() time.Time { return now })
	granted, logged := 0, 0
	for i := range 1000 {
		ok, no := th.take(fmt.Sprint("2001:db8:", i, "::/64"), true)
		if ok {
			granted++
		}
		if no.first {
			logged++
		}
	}
	if granted != globalBurst || logged != 1 {
		t.Fatalf("1,000 addresses got %d guesses at once and %d refusals were logged, want %d and 1", granted, logged, globalBurst)
	}
	ok, no := th.take("198.51.100.7", true)
	if ok || !no.global || no.retry != globalEvery {
		t.Fatalf("a new address once the global bucket is dry: ok %v, %+v; want refused by it for 1s", ok, no)
	}
	if len(th.clients) != globalBurst {
		t.Fatalf("%d buckets kept, want %d: a refused address gets none", len(th.clients), globalBurst)
	}
	if ok, _ := th.take("loopback", false); !ok {
		t.Fatal("the loopback address is refused by the others' guesses")
	}
	th.refund("2001:db8:1::/64", true) // the right token
	if ok, _ := th.take("198.51.100.7", true); !ok {
		t.Fatal("a right token did not give its global guess back")
	}
	now = now.Add(time.Minute)
	granted = 0
	for i := range 1000 {
		if ok, _ := th.take(fmt.Sprint("2001:db8:", 5000+i, "::/64"), true); ok {
			granted++
		}
	}
	if granted != globalBurst {
		t.Fatalf("a minute later 1,000 addresses got %d guesses, want %d", granted, globalBurst)
	}
}

// A full map forgets the buckets full again first, then the one used longest
// ago, drained or not (its state comes back with time, and the global bucket
// bounds what forgetting it gives back): a new client always gets a bucket
// of its own, never a shared one.
func TestThrottle_AFullMapForgetsTheOldestBuckets(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	th := newThrottle(func() time.Time { return now })
	drain := func(client string) {
		for range guessBurst {
			th.take(client, false) // as the loopback address: no global bucket
		}
	}
	for i := range maxClients {
		drain(fmt.Sprint("client-", i))
		now = now.Add(time.Millisecond)
	}
	drain("newcomer")
	if _, ok := th.clients["client-0"]; ok || len(th.clients) != maxClients {
		t.Fatalf("%d buckets, client-0 kept: want the oldest forgotten to make room", len(th.clients))
	}
	if ok, _ := th.take("newcomer", false); ok {
		t.Fatal("the newcomer's own bucket was not the one it drained")
	}
	if _, ok := th.clients["overflow"]; ok {
		t.Fatal("a shared overflow bucket exists")
	}
	// A minute later every bucket but the newest is full again: all go at once.
	now = now.Add(guessBurst*guessEvery - time.Duration(maxClients/2)*time.Millisecond)
	th.take("another", false)
	if n := len(th.clients); n >= maxClients/2+2 {
		t.Fatalf("%d buckets kept, want the full ones forgotten", n)
	}
}
