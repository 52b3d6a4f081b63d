package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) {
	// The demo re-executes its own binary as the worker it kills: in a test,
	// that binary is this test binary.
	if url := os.Getenv(envWorkerURL); url != "" {
		if err := runWorker(context.Background(), url, os.Getenv(envWorkerSchema)); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(noleaks.Main(m))
}

func TestDemo_ShowsRetriesARescueAndAFailureRow(t *testing.T) {
	var out bytes.Buffer
	if err := demo(t.Context(), &out, pgtest.URL(t), pgtest.Schema(t)); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"export   lost", "export   succeeded  true", // the crash, then the rescue
		"charge   failed", "(jitter)", "charge   succeeded", // retries with their delays
		"reason=retries_exhausted activity=ship attempts=3 errors=3 rescues=0", // the failure row
	} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q:\n%s", want, got)
		}
	}
}
