package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/sdk"
)

func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }

func TestErrorTypes_EachErrorGetsItsOwnPolicy(t *testing.T) {
	var out bytes.Buffer
	res, err := run(t.Context(), &out, pgtest.URL(t), pgtest.Schema(t))
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	reason := func(err error) sdk.Reason {
		var re *sdk.RunError
		if errors.As(err, &re) {
			return re.Reason
		}
		if err != nil {
			return sdk.Reason(err.Error())
		}
		return "ok"
	}
	for name, want := range map[string]struct {
		reason   sdk.Reason
		attempts int
		source   string // delay source of the first failed attempt
	}{
		"alice": {"ok", 5, "retry-after"},                  // 4 rate limits: the rule's 8 attempts, not the default 3
		"bob":   {sdk.ReasonNonRetryable, 1, ""},           // permanent: one attempt
		"carol": {sdk.ReasonRetriesExhausted, 3, "policy"}, // the default policy
		"dave":  {"ok", 3, "policy"},                       // maintenance rule: constant 100ms
	} {
		r := res[name]
		if got := reason(r.err); got != want.reason || len(r.history) != want.attempts {
			t.Errorf("%s: %s after %d attempts, want %s after %d", name, got, len(r.history), want.reason, want.attempts)
			continue
		}
		if want.source != "" && r.history[0].DelaySource != want.source {
			t.Errorf("%s: first delay from %q, want %q", name, r.history[0].DelaySource, want.source)
		}
	}
	if d := res["dave"].history[0].Delay; d == nil || d.Milliseconds() != 100 {
		t.Errorf("dave: first delay %v, want the maintenance rule's 100ms", d)
	}
	if !strings.Contains(out.String(), "explain") {
		t.Errorf("output:\n%s", out.String())
	}
}
