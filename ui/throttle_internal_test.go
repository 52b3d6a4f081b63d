package ui

import (
	"fmt"
	"testing"
	"time"
)

// A client's guesses come back one every guessEvery, up to guessBurst; a
// full map of clients forgets those whose bucket is full again.
func TestThrottle_RefillsOneGuessEverySixSeconds(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	th := newThrottle(func() time.Time { return now })
	for i := range guessBurst {
		if ok, _, _ := th.take("a"); !ok {
			t.Fatalf("guess %d refused", i+1)
		}
	}
	ok, retry, first := th.take("a")
	if ok || retry != guessEvery || !first {
		t.Fatalf("guess 11: ok %v, retry %s, first %v; want refused for 6s, first refusal", ok, retry, first)
	}
	if _, _, first := th.take("a"); first {
		t.Fatal("the second refusal in a row is logged again")
	}
	now = now.Add(3 * time.Second)
	if ok, retry, _ := th.take("a"); ok || retry != 3*time.Second {
		t.Fatalf("3s later: ok %v, retry %s; want refused for 3s more", ok, retry)
	}
	now = now.Add(3 * time.Second)
	if ok, _, _ := th.take("a"); !ok {
		t.Fatal("6s later: refused, want one guess back")
	}
	if ok, _, _ := th.take("a"); ok {
		t.Fatal("only one guess came back in 6s")
	}
	now = now.Add(time.Hour)
	for i := range guessBurst {
		if ok, _, _ := th.take("a"); !ok {
			t.Fatalf("an hour later, guess %d refused: the bucket holds %d", i+1, guessBurst)
		}
	}
	if ok, _, _ := th.take("a"); ok {
		t.Fatal("the bucket refilled past its burst")
	}

	for i := range maxClients + 10 {
		th.take(fmt.Sprint("client-", i))
	}
	if n := len(th.clients); n > maxClients+1 {
		t.Fatalf("%d buckets kept, want at most %d and the shared one", n, maxClients)
	}
	if _, ok := th.clients["overflow"]; !ok {
		t.Fatal("the clients past the limit have no shared bucket")
	}
}
