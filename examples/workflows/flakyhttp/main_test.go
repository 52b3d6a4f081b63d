package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/sdk"
)

func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }

func TestFlakyHTTP_WaitsWhatTheServerAsksAndRecordsIt(t *testing.T) {
	var out bytes.Buffer
	o, err := run(t.Context(), &out, pgtest.URL(t), pgtest.Schema(t))
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if o.quoteErr != nil || o.quote.PriceCents != 24900 {
		t.Fatalf("quote %+v, %v", o.quote, o.quoteErr)
	}
	h := o.history
	if len(h) != 3 || h[0].Status != "failed" || h[1].Status != "failed" || h[2].Status != "succeeded" {
		t.Fatalf("history %+v", h)
	}
	for i, want := range []time.Duration{time.Second, 1500 * time.Millisecond} {
		if h[i].Delay == nil || *h[i].Delay != want || h[i].DelaySource != "retry-after" {
			t.Errorf("attempt %d: delay %v (%s), want %s from retry-after", i+1, h[i].Delay, h[i].DelaySource, want)
		}
	}
	if waited := h[1].StartedAt.Sub(h[0].StartedAt); waited < time.Second {
		t.Errorf("attempt 2 started %s after attempt 1: the Retry-After was not honoured", waited)
	}
	var re *sdk.RunError
	if !errors.As(o.missErr, &re) || re.Reason != sdk.ReasonNonRetryable || !strings.Contains(re.Message, "404") {
		t.Errorf("unknown product: %v, want non_retryable with the 404", o.missErr)
	}
	if !strings.Contains(out.String(), "1.5s (retry-after)") || !strings.Contains(out.String(), "attempt_timeline") {
		t.Errorf("output:\n%s", out.String())
	}
}
