package store_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/store"
)

// The input hash is stable (the same on every machine and build: a replay
// compares it with one recorded elsewhere) and tells inputs apart: every
// change of one byte, and 10,000 inputs of one shape.
func TestInputHash_IsStableAndTellsInputsApart(t *testing.T) {
	t.Parallel()
	// Pinned: a hash recorded by one build is compared by the next.
	for in, want := range map[string]uint64{
		"":                                 0x25fc6dd36ce04b20,
		"a":                                0xed08d66f02f0597e,
		`{"n":1}`:                          0x27aa0db6ebb83a9a,
		`{"amount":1250,"currency":"EUR"}`: 0x6ef6dac3b89e84ef,
	} {
		if got := store.InputHash([]byte(in)); got != want {
			t.Errorf("InputHash(%q) = %#x, want %#x", in, got, want)
		}
	}
	base := []byte(`{"amount":1250,"currency":"EUR","note":"x"}`)
	for i := range base {
		for _, bit := range []byte{1, 0x80} {
			changed := append([]byte(nil), base...)
			changed[i] ^= bit
			if store.InputHash(changed) == store.InputHash(base) {
				t.Fatalf("byte %d with bit %#x flipped: the same hash", i, bit)
			}
		}
	}
	if store.InputHash(base) == store.InputHash(append(base, 0)) {
		t.Fatal("a trailing NUL byte: the same hash")
	}
	seen := map[uint64]string{}
	for i := range 10000 {
		in := fmt.Sprintf(`{"n":%d}`, i)
		h := store.InputHash([]byte(in))
		if other, dup := seen[h]; dup || h == 0 {
			t.Fatalf("InputHash(%s) = %x, as %s's (or 0)", in, h, other)
		}
		seen[h] = in
	}
}

// What the hash costs a step, by the size of its encoded input (issue 23:
// at most 1 µs a step).
func BenchmarkInputHash(b *testing.B) {
	for _, n := range []int{64, 256, 1024} {
		input := []byte(`{"s":"` + strings.Repeat("x", n-8) + `"}`)
		b.Run(fmt.Sprintf("%dB", len(input)), func(b *testing.B) {
			b.SetBytes(int64(len(input)))
			for b.Loop() {
				store.InputHash(input)
			}
		})
	}
}
