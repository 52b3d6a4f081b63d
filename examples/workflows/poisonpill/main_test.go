package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/sdk"
)

func TestMain(m *testing.M) {
	// The example re-executes its own binary as its workers: in a test, that
	// binary is this test binary.
	if url := os.Getenv(envWorkerURL); url != "" {
		if err := runWorker(context.Background(), url, os.Getenv(envWorkerSchema), os.Getenv(envWorkerLabel)); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(noleaks.Main(m))
}

func TestPoisonPill_QuarantinedByTheRescueBudget(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o, err := run(t.Context(), &out, pgtest.URL(t), pgtest.Schema(t), self)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if o.failure.Reason != sdk.ReasonRescuesExhausted || o.failure.Activity != "decode-image" {
		t.Errorf("failure %+v, want rescues_exhausted in decode-image", o.failure)
	}
	// MaxRescues(2): three attempts lost, each on another worker; the fourth
	// worker quarantines the run without running it again.
	if o.killed != 3 || o.workers != 4 {
		t.Errorf("%d workers started, %d killed; want 4 and 3", o.workers, o.killed)
	}
	var got []string
	for _, a := range o.history {
		got = append(got, string(a.Status)+"@"+a.Worker)
	}
	if strings.Join(got, " ") != "lost@worker-1 lost@worker-2 lost@worker-3" {
		t.Errorf("attempts %v", got)
	}
	if !strings.Contains(out.String(), "failures requeue") {
		t.Errorf("output:\n%s", out.String())
	}
}
