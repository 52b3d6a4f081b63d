package ui

import (
	"fmt"
	"math"
	"net"
	"strings"
)

// MinTokenBits is the strength below which a write token is weak: 128 bits,
// what tenure ui generates (32 random hexadecimal digits) and what 22
// random base64 characters give.
const MinTokenBits = 128

// TokenBits estimates the strength of a token, in bits, as if each of its
// characters had been drawn at random from the smallest of these alphabets
// that holds them all:
//
//	decimal digits                            10 characters, 3.3 bits each
//	hexadecimal digits of one case            16             4
//	digits and letters of one case            36             5.2
//	digits and letters                        62             5.95
//	base64 or base64url (with = padding)      64             6
//	printable ASCII                           95             6.6
//	anything else                             256 per byte   8
//
// A token that repeats a shorter one ("abcabcabc") counts as that shorter
// one. It is an upper bound: a word, a name or a date is far weaker than
// its letters count, so a token should come from a random generator
// (openssl rand -hex 16, or the one tenure ui generates).
func TokenBits(token string) int {
	if token == "" {
		return 0
	}
	p := period(token)
	return int(math.Floor(float64(p) * math.Log2(alphabet(token))))
}

// period is the length of the shortest prefix of s that s repeats (with a
// partial last repetition): len(s) for a token that repeats nothing.
func period(s string) int {
	for p := 1; p < len(s); p++ {
		repeats := true
		for i := p; i < len(s); i++ {
			if s[i] != s[i-p] {
				repeats = false
				break
			}
		}
		if repeats {
			return p
		}
	}
	return len(s)
}

// alphabet is the size of the smallest alphabet of TokenBits's list that
// holds every byte of s.
func alphabet(s string) float64 {
	all := func(ok func(c byte) bool) bool {
		for i := range len(s) {
			if !ok(s[i]) {
				return false
			}
		}
		return true
	}
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	lower := func(c byte) bool { return c >= 'a' && c <= 'z' }
	upper := func(c byte) bool { return c >= 'A' && c <= 'Z' }
	alnum := func(c byte) bool { return digit(c) || lower(c) || upper(c) }
	switch {
	case all(digit):
		return 10
	case all(func(c byte) bool { return digit(c) || c >= 'a' && c <= 'f' }),
		all(func(c byte) bool { return digit(c) || c >= 'A' && c <= 'F' }):
		return 16
	case all(func(c byte) bool { return digit(c) || lower(c) }), all(func(c byte) bool { return digit(c) || upper(c) }):
		return 36
	case all(alnum):
		return 62
	case all(func(c byte) bool { return alnum(c) || c == '+' || c == '/' || c == '=' }),
		all(func(c byte) bool { return alnum(c) || c == '-' || c == '_' || c == '=' }):
		return 64
	case all(func(c byte) bool { return c >= 0x20 && c < 0x7f }):
		return 95
	}
	return 256
}

// CheckToken returns an error saying how weak token is when TokenBits
// counts fewer than MinTokenBits bits in it, else nil. New logs it as a
// warning (a weak token is accepted: it is the operator's call); tenure ui
// prints it.
func CheckToken(token string) error {
	bits := TokenBits(token)
	if bits >= MinTokenBits {
		return nil
	}
	return fmt.Errorf("the write token (tenure ui --token or $TENURE_UI_TOKEN; ui.Config.Token) has at most %d bits of entropy, fewer than %d: "+
		"whoever reaches the UI can guess it (login is throttled, not stopped); use 32 random hexadecimal digits (openssl rand -hex 16), "+
		"or let tenure ui --write generate one", bits, MinTokenBits)
}

// ListenWarning returns what to tell whoever starts the UI listening on
// addr (host:port, as net.Listen takes it; best, the listener's own
// Addr().String()) when that is not a loopback address: its pages are then
// readable from the network, by anyone who can reach the port. It returns
// "" for a loopback address (127.0.0.0/8, ::1, localhost). tenure ui prints
// it at start.
func ListenWarning(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return ""
	}
	ip := net.ParseIP(host)
	if ip != nil && ip.IsLoopback() {
		return ""
	}
	where := "on " + addr
	if host == "" || ip != nil && ip.IsUnspecified() {
		where = "on every network interface (" + addr + ")"
		if port != "" {
			where = "on every network interface, port " + port + " (--addr)"
		}
	} else {
		where += " (--addr), not a loopback address"
	}
	return "the UI listens " + where + ": anyone who can reach it reads every run, failure and payload (--hide-payloads hides the payloads) " +
		"and can try to guess the write token. Keep the default --addr 127.0.0.1:8080 and reach it through an SSH tunnel, " +
		"or put it behind an authenticating proxy (--allowed-host names the proxy's host name)"
}
