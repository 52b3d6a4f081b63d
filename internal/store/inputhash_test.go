package store_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/store"
)

// The input hash is the same for every encoding of one JSON value, in
// particular for an output that comes back from jsonb reordered, respaced
// and unescaped (a step whose input carries it raw hashes alike on replay),
// and differs for any other value.
func TestInputHash_OneValueOneHashOtherValuesOthers(t *testing.T) {
	t.Parallel()
	for _, same := range [][]string{
		{`{"bb":1,"a":2}`, `{"a": 2, "bb": 1}`, " {\n\t\"a\" : 2 ,\"bb\":1}\n"},
		{`"<tag>&"`, `"\u003ctag\u003e\u0026"`, `"\u003Ctag\u003E\u0026"`},
		{`"é 😀"`, `"\u00e9 \ud83d\ude00"`},
		{`100`, `1e2`, `100.0`, `1E+2`, `0.1e3`, `1000e-1`},
		{`0`, `-0`, `0.0`, `0e5`},
		{`1e21`, `1e+21`, `1000000000000000000000`},
		{`12.5`, `1.25e1`, `125e-1`, `12.50`},
		{`-1.5`, `-15e-1`},
		{`0.001`, `1e-3`},
		{`9007199254740992.0`, `9007199254740992`},
		{`[1,{"x":[true,false,null]}]`, `[ 1 , { "x" : [ true , false , null ] } ]`},
		{`{"a":{"c":3,"b":2},"d":[]}`, `{"d": [], "a": {"b": 2, "c": 3}}`},
	} {
		want := store.InputHash([]byte(same[0]))
		for _, in := range same[1:] {
			if got := store.InputHash([]byte(in)); got != want {
				t.Errorf("InputHash(%s) = %x, InputHash(%s) = %x: want them equal", same[0], want, in, got)
			}
		}
	}
	distinct := []string{
		`{"a":1,"b":2}`, `{"a":2,"b":1}`, `{"a":1}`, `{"b":1}`, `{"a":"1"}`, `{"a":[1]}`, `{}`, `[]`, `""`, `null`,
		`[1,2]`, `[2,1]`, `[[1],2]`, `[1,[2]]`, `"ab"`, `"ba"`, `1`, `-1`, `1.5`, `true`, `false`, `"true"`,
		`9007199254740993`, `9007199254740992`, `12345678901234567890123`, `12345678901234567890124`,
		`{"a":{"b":1}}`, `{"a":{"b":2}}`, `{"a":1,"a2":1}`, `{"a":11}`, `not json`, `{"a":`,
		`0.1`, `0.1000000000000000000001`, `5e-324`, `3e-323`, `3.5e-323`, `1e400`, `1e-400`, `10`, `0.01`, `-10`,
	}
	seen := map[uint64]string{}
	for _, in := range distinct {
		h := store.InputHash([]byte(in))
		if other, dup := seen[h]; dup || h == 0 {
			t.Errorf("InputHash(%s) = %x, as InputHash(%s) (or 0)", in, h, other)
		}
		seen[h] = in
	}
	for i := range 10000 {
		in := fmt.Sprintf(`{"order":%d,"note":"n%d"}`, i, i%7)
		h := store.InputHash([]byte(in))
		if other, dup := seen[h]; dup {
			t.Fatalf("InputHash(%s) = %x, as InputHash(%s)", in, h, other)
		}
		seen[h] = in
	}
	// Pinned: a hash recorded by one build is compared by the next.
	for in, want := range map[string]uint64{
		`{"n":1}`:                          0x406ca4d9c3102b24,
		`{"amount":1250,"currency":"EUR"}`: 0xfbc620212ca24c2a,
		"not json":                         0xccd8ca327cf59f0b,
	} {
		if got := store.InputHash([]byte(in)); got != want {
			t.Errorf("InputHash(%q) = %#x, want %#x", in, got, want)
		}
	}
}

// What the hash costs a step, by the size of its encoded input (issue 23:
// at most 1 µs a step): a struct's JSON, a long string, many escaped ones.
func BenchmarkInputHash(b *testing.B) {
	type order struct {
		ID       int64             `json:"id"`
		Customer string            `json:"customer"`
		Amount   float64           `json:"amount"`
		Items    []string          `json:"items"`
		Meta     map[string]string `json:"meta"`
	}
	small, _ := json.Marshal(order{ID: 42, Customer: "ada", Amount: 12.5, Items: []string{"a"}})
	medium, _ := json.Marshal(order{ID: 42, Customer: strings.Repeat("x", 40), Amount: 12.5,
		Items: []string{"apple", "banana", "cherry", "date"}, Meta: map[string]string{"source": "web", "campaign": "winter-sale"}})
	long := []byte(`{"s":"` + strings.Repeat("x", 1000) + `"}`)
	// Escaped strings (Go's encoder escapes & < >): each decoded on its own,
	// linear in the input (a first version allocated the rest of the input
	// for each one: 3.8 s for 250 KB).
	escaped := []byte(`[` + strings.Repeat(`"a&b
",`, 5000) + `"x"]`)
	for _, in := range [][]byte{small, medium, long, escaped} {
		b.Run(fmt.Sprintf("%dB", len(in)), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				store.InputHash(in)
			}
		})
	}
}
