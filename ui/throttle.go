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

// Guesses of the write token are throttled per client address: a bucket of
// guessBurst guesses that refills one every guessEvery. A right token gives
// its guess back, so people and scripts that know it are never slowed; a
// client out of guesses is answered 429 with Retry-After before its token
// is even compared. With the defaults, a guesser gets 10 tries, then 10 a
// minute: 14,400 a day, against the 2^128 of a strong token.
const (
	guessBurst = 10
	guessEvery = 6 * time.Second
	// maxClients bounds the buckets kept; past it, the clients without one
	// share one more bucket (an attacker with many addresses then throttles
	// them all, itself included).
	maxClients = 4096
)

// throttle is the token guesses' rate limit, per client address. Its
// buckets refill when they are next used: it owns no goroutine.
type throttle struct {
	mu      sync.Mutex
	now     func() time.Time
	clients map[string]*bucket
}

type bucket struct {
	guesses float64   // guesses left
	at      time.Time // when guesses was last brought up to date
	dry     bool      // refused since it last had a guess (logged once)
}

func newThrottle(now func() time.Time) *throttle {
	return &throttle{now: now, clients: map[string]*bucket{}}
}

// take spends one guess of the client's, or reports how long until it has
// one again, and whether this is the first refusal since it had one.
func (t *throttle) take(client string) (ok bool, retry time.Duration, first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	b := t.bucketOf(client, now)
	if b.guesses < 1 {
		first, b.dry = !b.dry, true
		return false, time.Duration((1 - b.guesses) * float64(guessEvery)), first
	}
	b.guesses--
	b.dry = false
	return true, 0, false
}

// refund gives back the guess of a client whose token was right.
func (t *throttle) refund(client string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucketOf(client, t.now())
	b.guesses = min(b.guesses+1, guessBurst)
}

// bucketOf returns the client's bucket, brought up to date; t.mu is held.
func (t *throttle) bucketOf(client string, now time.Time) *bucket {
	b, ok := t.clients[client]
	if !ok {
		if len(t.clients) >= maxClients {
			for c, old := range t.clients { // forget the clients whose bucket is full again
				if old.guesses+float64(now.Sub(old.at))/float64(guessEvery) >= guessBurst {
					delete(t.clients, c)
				}
			}
		}
		if len(t.clients) >= maxClients {
			client = "overflow"
			if b, ok = t.clients[client]; ok {
				return t.refill(b, now)
			}
		}
		b = &bucket{guesses: guessBurst, at: now}
		t.clients[client] = b
		return b
	}
	return t.refill(b, now)
}

func (t *throttle) refill(b *bucket, now time.Time) *bucket {
	if now.After(b.at) {
		b.guesses = min(b.guesses+float64(now.Sub(b.at))/float64(guessEvery), guessBurst)
		b.at = now
	}
	return b
}

// clientOf is the address a request's guesses are counted against: the
// peer's IP (not X-Forwarded-For, which any client can write), an IPv6
// address by its /64, the block one host usually holds.
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// guess spends one of the request's client's guesses of the token. When it
// has none left, guess answers 429 with Retry-After (logging the first
// refusal of a run of them) and returns false: the token must then not be
// compared at all.
func (h *handler) guess(w http.ResponseWriter, r *http.Request, title string) bool {
	client := clientOf(r)
	ok, retry, first := h.guesses.take(client)
	if ok {
		return true
	}
	secs := int((retry + time.Second - 1) / time.Second)
	if first {
		h.log.Warn("ui: wrong tokens: throttling the client's guesses", "client", client, "retry_after_s", secs)
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	h.fail(w, r, http.StatusTooManyRequests, title, fmt.Errorf(
		"too many wrong tokens from your address: try again in %ds (%d wrong tokens are allowed at once, then one every %s)",
		secs, guessBurst, guessEvery))
	return false
}
