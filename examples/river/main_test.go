package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/tenurehq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestRiverHandoff_ExactlyOnceBothWays(t *testing.T) {
	var out bytes.Buffer
	o, err := run(t.Context(), &out, pgtest.URL(t), pgtest.Schema(t))
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if o.attempts != 2 || o.jobs != 1 || o.jobID == 0 {
		t.Errorf("%d attempts left %d River jobs (ID %d): want 2 attempts and exactly one job", o.attempts, o.jobs, o.jobID)
	}
	if o.notification != "tracking number sent for A-7" {
		t.Errorf("notification %q", o.notification)
	}
	t.Log(out.String())
}
