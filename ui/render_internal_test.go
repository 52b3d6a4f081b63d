package ui

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A payload cut for the page ends at a character's start: no half of a
// multi-byte character is shown.
func TestPayload_IsCutAtACharacterBoundary(t *testing.T) {
	h := &handler{cfg: Config{MaxPayload: 10}}
	b := []byte(`"` + strings.Repeat("é", 20) + `"`) // 2 bytes a character after the quote
	p := h.payload(b)
	if !p.Truncated || !utf8.ValidString(p.Text) || p.Shown != len(p.Text) || p.Shown > 10 {
		t.Fatalf("cut payload: %+v (valid UTF-8: %v)", p, utf8.ValidString(p.Text))
	}
}
