package ui

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Guesses of the write token are throttled twice: per client address, a
// bucket of guessBurst guesses that refills one every guessEvery; and for
// all addresses together but the loopback one, a bucket of globalBurst
// guesses that refills one every globalEvery. A right token gives its
// guesses back, so people and scripts that know it are never slowed; a
// client out of guesses is answered 429 with Retry-After before its token is
// even compared. With the defaults, one address gets 10 tries, then 10 a
// minute (14,400 a day), and all addresses together at most 60 at once,
// then 60 a minute (86,400 a day), however many addresses they have (IPv6
// /64s are cheap), against the 2^128 of a strong token. The loopback address
// is one address, bounded by its own bucket alone, so that an operator on
// the UI's machine (or through an SSH tunnel) can log in while others
// guess from the network.
const (
	guessBurst  = 10
	guessEvery  = 6 * time.Second
	globalBurst = 60
	globalEvery = time.Second
	// maxClients bounds the buckets kept. A bucket full again is the same
	// as none and is forgotten first; past that, the least recently used.
	// Forgetting a drained bucket gives its client its guesses back early,
	// but only as the global bucket allows (a new bucket is made only for a
	// guess it grants), so the map hardly ever fills: in any minute at most
	// globalBurst + 60 buckets are not full again.
	maxClients = 4096
)

// throttle is the token guesses' rate limit. Its buckets refill when they
// are next used: it owns no goroutine.
type throttle struct {
	mu      sync.Mutex
	now     func() time.Time
	clients map[string]*bucket
	global  bucket // of every client but the loopback one
}

type bucket struct {
	guesses float64   // guesses left
	at      time.Time // when guesses was last brought up to date
	dry     bool      // refused since it last had a guess (logged once)
}

func newThrottle(now func() time.Time) *throttle {
	return &throttle{now: now, clients: map[string]*bucket{}, global: bucket{guesses: globalBurst, at: now()}}
}

// refusal says why take refused a guess: how long until there is one
// again, whether this is the first refusal since there was one (it is
// logged), and whether the global bucket is the one out of guesses.
type refusal struct {
	retry  time.Duration
	first  bool
	global bool
}

// take spends one guess of client's, and of the global bucket's when
// shared (the client is not the loopback address), or says why not. A
// client refused by the global bucket is not given a bucket of its own.
func (t *throttle) take(client string, shared bool) (bool, refusal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if shared {
		refill(&t.global, now, globalBurst, globalEvery)
		if t.global.guesses < 1 {
			return false, dry(&t.global, globalEvery, true)
		}
	}
	b := t.bucketOf(client, now)
	if b.guesses < 1 {
		return false, dry(b, guessEvery, false)
	}
	b.guesses--
	b.dry = false
	if shared {
		t.global.guesses--
		t.global.dry = false
	}
	return true, refusal{}
}

// dry marks b refused and says for how long; t.mu is held.
func dry(b *bucket, every time.Duration, global bool) refusal {
	r := refusal{retry: time.Duration((1 - b.guesses) * float64(every)), first: !b.dry, global: global}
	b.dry = true
	return r
}

// refund gives back the guesses of a client whose token was right.
func (t *throttle) refund(client string, shared bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	b := t.bucketOf(client, now)
	b.guesses = min(b.guesses+1, guessBurst)
	if shared {
		refill(&t.global, now, globalBurst, globalEvery)
		t.global.guesses = min(t.global.guesses+1, globalBurst)
	}
}

// bucketOf returns the client's bucket, brought up to date, making one
// (and making room for it) when it has none; t.mu is held.
func (t *throttle) bucketOf(client string, now time.Time) *bucket {
	if b, ok := t.clients[client]; ok {
		refill(b, now, guessBurst, guessEvery)
		return b
	}
	if len(t.clients) >= maxClients {
		t.evict(now)
	}
	b := &bucket{guesses: guessBurst, at: now}
	t.clients[client] = b
	return b
}

// evict forgets the buckets full again, and when none is, the one used
// longest ago; t.mu is held.
func (t *throttle) evict(now time.Time) {
	var oldest string
	for c, b := range t.clients {
		if b.guesses+float64(now.Sub(b.at))/float64(guessEvery) >= guessBurst {
			delete(t.clients, c)
		} else if oldest == "" || b.at.Before(t.clients[oldest].at) {
			oldest = c
		}
	}
	if len(t.clients) >= maxClients {
		delete(t.clients, oldest)
	}
}

// refill brings b up to date: one guess back every every, up to burst.
func refill(b *bucket, now time.Time, burst float64, every time.Duration) {
	if now.After(b.at) {
		b.guesses = min(b.guesses+float64(now.Sub(b.at))/float64(every), burst)
		b.at = now
	}
}

// clientOf is the address a request's guesses are counted against: the
// peer's IP (not X-Forwarded-For, which any client can write), an IPv6
// address by its /64, the block one host usually holds; and whether it
// counts against the global bucket too (every address but a loopback one).
func clientOf(r *http.Request) (client string, shared bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host, true
	}
	ip = ip.Unmap()
	if ip.IsLoopback() {
		return "loopback", false
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String(), true
	}
	return ip.String(), true
}

// guess spends one of the request's client's guesses of the token. When it
// has none left, or all addresses together have none, guess answers 429
// with Retry-After (logging the first refusal of a run of them) and returns
// false: the token must then not be compared at all.
func (h *handler) guess(w http.ResponseWriter, r *http.Request, title string) bool {
	client, shared := clientOf(r)
	ok, no := h.guesses.take(client, shared)
	if ok {
		return true
	}
	secs := int((no.retry + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	if no.global {
		if no.first {
			h.log.Warn("ui: wrong tokens from many addresses: throttling every guess but the loopback address's", "client", client, "retry_after_s", secs)
		}
		h.fail(w, r, http.StatusTooManyRequests, title, fmt.Errorf(
			"too many wrong tokens from many addresses: try again in %ds (%d wrong tokens a minute are allowed from all addresses together; the UI's own machine, 127.0.0.1, is not held up)",
			secs, int(time.Minute/globalEvery)))
		return false
	}
	if no.first {
		h.log.Warn("ui: wrong tokens: throttling the client's guesses", "client", client, "retry_after_s", secs)
	}
	h.fail(w, r, http.StatusTooManyRequests, title, fmt.Errorf(
		"too many wrong tokens from your address: try again in %ds (%d wrong tokens are allowed at once, then one every %s)",
		secs, guessBurst, guessEvery))
	return false
}
