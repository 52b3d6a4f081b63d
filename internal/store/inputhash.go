package store

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// InputHash is the hash a step records of its encoded input (JSON), the
// same for every encoding of one JSON value: whitespace, the order of an
// object's members, string escapes ("\u003c" or "<") and a number's form
// ("1e2", "100.0" or "100") do not change it. So a step whose input carries
// an earlier step's output as raw JSON (json.RawMessage) hashes alike when
// that output comes back from PostgreSQL's jsonb on replay, reordered and
// respaced. A change of any value, key or element does change it, but for
// odds of about 2^-64; an input that is not JSON is hashed as its bytes.
// Stable across processes, builds and machines: a replay compares it with
// one recorded by another. No protection against inputs made to collide.
func InputHash(input []byte) uint64 {
	h, rest, ok := canonical(input, 0)
	if ok && len(skipSpace(rest)) == 0 {
		return nonZero(mix(h))
	}
	return nonZero(mix(wordHash(tagRaw, input)))
}

// The tags that keep values of different types apart.
const (
	tagRaw uint64 = iota + 0x9e3779b97f4a7c15
	tagObject
	tagArray
	tagString
	tagNumber
	tagTrue
	tagFalse
	tagNull
)

// maxDepth is the deepest nesting hashed as JSON; deeper is hashed raw.
const maxDepth = 1000

// canonical hashes the JSON value at the start of b and returns what
// follows it; ok is false when b does not start with one.
func canonical(b []byte, depth int) (h uint64, rest []byte, ok bool) {
	b = skipSpace(b)
	if len(b) == 0 || depth > maxDepth {
		return 0, b, false
	}
	switch c := b[0]; {
	case c == '{':
		return object(b[1:], depth)
	case c == '[':
		return array(b[1:], depth)
	case c == '"':
		return str(b[1:])
	case c == '-' || c >= '0' && c <= '9':
		return number(b)
	case bytes.HasPrefix(b, []byte("true")):
		return tagTrue, b[4:], true
	case bytes.HasPrefix(b, []byte("false")):
		return tagFalse, b[5:], true
	case bytes.HasPrefix(b, []byte("null")):
		return tagNull, b[4:], true
	}
	return 0, b, false
}

// object hashes an object's members after its '{': each member's key and
// value together, summed, so that their order does not count.
func object(b []byte, depth int) (uint64, []byte, bool) {
	var sum, n uint64
	b = skipSpace(b)
	if len(b) > 0 && b[0] == '}' {
		return mix(tagObject), b[1:], true
	}
	for {
		b = skipSpace(b)
		if len(b) == 0 || b[0] != '"' {
			return 0, b, false
		}
		k, rest, ok := str(b[1:])
		if !ok {
			return 0, b, false
		}
		rest = skipSpace(rest)
		if len(rest) == 0 || rest[0] != ':' {
			return 0, b, false
		}
		v, rest, ok := canonical(rest[1:], depth+1)
		if !ok {
			return 0, b, false
		}
		sum += mix(k*0x9e3779b97f4a7c15 + v) // a key and its value, not two of either
		n++
		b = skipSpace(rest)
		if len(b) == 0 {
			return 0, b, false
		}
		switch b[0] {
		case ',':
			b = b[1:]
		case '}':
			return mix(mix(tagObject^sum) ^ n), b[1:], true
		default:
			return 0, b, false
		}
	}
}

// array hashes an array's elements after its '[', in order (FNV-1a's
// step over their hashes: each a bijection, so no two orders alike).
func array(b []byte, depth int) (uint64, []byte, bool) {
	const prime = 1099511628211
	h := tagArray
	b = skipSpace(b)
	if len(b) > 0 && b[0] == ']' {
		return mix(h), b[1:], true
	}
	for {
		v, rest, ok := canonical(b, depth+1)
		if !ok {
			return 0, b, false
		}
		h = (h ^ v) * prime
		b = skipSpace(rest)
		if len(b) == 0 {
			return 0, b, false
		}
		switch b[0] {
		case ',':
			b = b[1:]
		case ']':
			return mix(h), b[1:], true
		default:
			return 0, b, false
		}
	}
}

// str hashes a string's characters after its opening quote, its escapes
// decoded: in place when it has none (the common case), else decoded first.
func str(b []byte) (uint64, []byte, bool) {
	end := bytes.IndexByte(b, '"')
	if end < 0 {
		return 0, b, false
	}
	if bytes.IndexByte(b[:end], '\\') < 0 {
		return wordHash(tagString, b[:end]), b[end+1:], true
	}
	decoded := make([]byte, 0, end) // about the string's length: end is its first quote
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			return wordHash(tagString, decoded), b[i+1:], true
		case c != '\\':
			decoded = append(decoded, c)
			i++
			continue
		case i+1 >= len(b):
			return 0, b, false
		}
		e := b[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			decoded = append(decoded, e)
		case 'b':
			decoded = append(decoded, '\b')
		case 'f':
			decoded = append(decoded, '\f')
		case 'n':
			decoded = append(decoded, '\n')
		case 'r':
			decoded = append(decoded, '\r')
		case 't':
			decoded = append(decoded, '\t')
		case 'u':
			r, n := unicodeEscape(b[i-2:])
			if n == 0 {
				return 0, b, false
			}
			decoded = utf8.AppendRune(decoded, r)
			i += n - 2
		default:
			return 0, b, false
		}
	}
	return 0, b, false
}

// unicodeEscape decodes the \uXXXX at the start of b, with its low
// surrogate's \uXXXX when it is a high one; n is the bytes read, 0 for none.
func unicodeEscape(b []byte) (rune, int) {
	hex4 := func(b []byte) rune {
		if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
			return -1
		}
		v, err := strconv.ParseUint(string(b[2:6]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(v)
	}
	r := hex4(b)
	if r < 0 {
		return 0, 0
	}
	if utf16.IsSurrogate(r) {
		if r2 := hex4(b[6:]); r2 >= 0 {
			if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
				return d, 12
			}
		}
		return utf8.RuneError, 6
	}
	return r, 6
}

// number hashes the number at the start of b by its exact decimal value:
// its sign, its significant digits and their power of ten, so that 100,
// 100.0, 1e2 and 1E+2 hash alike (jsonb prints a number in its own form) and
// any two different values apart, however many digits they have.
func number(b []byte) (uint64, []byte, bool) {
	end := 0
	for end < len(b) {
		c := b[end]
		if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			break
		}
		end++
	}
	lit := b[:end]
	neg := len(lit) > 0 && lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	mant, exp := lit, int64(0)
	if i := bytes.IndexAny(lit, "eE"); i >= 0 {
		e, err := strconv.ParseInt(string(lit[i+1:]), 10, 64)
		if err != nil {
			return 0, b, false
		}
		mant, exp = lit[:i], e
	}
	intPart, frac := mant, []byte(nil)
	if i := bytes.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	if len(intPart) == 0 || !digitsOnly(intPart) || !digitsOnly(frac) || (frac != nil && len(frac) == 0) {
		return 0, b, false
	}
	// The significant digits D, intPart then frac without the zeros that
	// lead or trail, and the power of ten p with value = 0.D × 10^p.
	for len(intPart) > 0 && intPart[0] == '0' {
		intPart = intPart[1:]
	}
	if len(intPart) == 0 {
		for len(frac) > 0 && frac[0] == '0' {
			frac, exp = frac[1:], exp-1
		}
	}
	for len(frac) > 0 && frac[len(frac)-1] == '0' {
		frac = frac[:len(frac)-1]
	}
	if len(frac) == 0 {
		for len(intPart) > 0 && intPart[len(intPart)-1] == '0' {
			intPart, exp = intPart[:len(intPart)-1], exp+1
		}
	}
	if len(intPart)+len(frac) == 0 {
		return mix(tagNumber), b[end:], true // zero, of any sign and form
	}
	const prime = 1099511628211
	h := tagNumber
	for _, part := range [2][]byte{intPart, frac} { // D byte by byte: however it was split
		for _, c := range part {
			h = (h ^ uint64(c)) * prime
		}
	}
	h = mix(mix(h) ^ uint64(exp+int64(len(intPart))))
	if neg {
		h = ^h
	}
	return h, b[end:], true
}

func digitsOnly(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// wordHash is FNV-1a's step (xor, then multiply by its prime) over b 8
// bytes at a time, then its tail and length: each step is a bijection of
// the hash for a given word, so two byte strings of one length that differ
// in a single word always hash apart.
func wordHash(seed uint64, b []byte) uint64 {
	const prime = 1099511628211
	h := seed ^ 14695981039346656037
	n := uint64(len(b))
	for len(b) >= 8 {
		h = (h ^ binary.LittleEndian.Uint64(b)) * prime
		b = b[8:]
	}
	var tail [8]byte
	copy(tail[:], b)
	h = (h ^ binary.LittleEndian.Uint64(tail[:])) * prime
	return (h ^ n) * prime
}

// mix is SplitMix64's finalizer, a bijection that spreads every bit.
func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// nonZero keeps 0 for "none recorded".
func nonZero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}
