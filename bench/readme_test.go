package main

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
)

// Every `go run .` of the README parses as written: its flags exist and
// their values are valid (nothing is run).
func TestREADME_CommandsParse(t *testing.T) {
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, line := range strings.Split(string(md), "\n") {
		args, ok := strings.CutPrefix(strings.TrimSpace(line), "go run .")
		if !ok {
			continue
		}
		n++
		if hash := strings.Index(args, "#"); hash >= 0 {
			args = args[:hash]
		}
		words, err := shellWords(args)
		if err != nil {
			t.Errorf("README.md:%d: %v", i+1, err)
			continue
		}
		if _, _, err := parseArgs(words, io.Discard); err != nil {
			t.Errorf("README.md:%d: go run .%s: %v", i+1, args, err)
		}
	}
	if n < 5 {
		t.Fatalf("found %d `go run .` lines in README.md, want the 5 or more it has", n)
	}
	if _, _, err := parseArgs([]string{"-d-workers", "1,0"}, io.Discard); err == nil {
		t.Error("-d-workers 1,0 parsed, want an error")
	}
}

// shellWords splits s as sh does for words, double and single quotes, no
// expansions.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words, in = append(words, cur.String()), false
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, errors.New("an unterminated quote")
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}
