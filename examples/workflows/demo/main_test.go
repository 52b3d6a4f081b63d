package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/tenuretest"
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
	if os.Getenv(exampledb.ProgramEnv) != "" { // exampledb.RunProgram runs the program
		main()
		os.Exit(0)
	}
	code := tenuretest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The program as go run runs it without DATABASE_URL: on a private cluster
// of its own, saying so on its first line, with nothing on stderr (no
// warning that no worker serves a run it starts).
func TestDemo_RunsQuietlyAsGoRunRunsIt(t *testing.T) {
	t.Parallel()
	out := exampledb.RunProgram(t, 3*time.Minute)
	for _, want := range []string{
		"the lease expired, this process's worker rescued the run: \"exported A-17\"",
		"reason=retries_exhausted activity=ship attempts=3 errors=3 rescues=0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the program's output lacks %q:\n%s", want, out)
		}
	}
}

// The demo as go run runs it, in a schema of the kit's: a worker process
// SIGKILLed in the middle of an export, then this process's worker.
func TestDemo_ShowsRetriesARescueAndAFailureRow(t *testing.T) {
	t.Parallel()
	env := tenuretest.New(t) // a schema of the test's own (demo recreates it), dropped after the test
	var out bytes.Buffer
	if err := demo(t.Context(), &out, tenuretest.URL(t), env.Schema); err != nil {
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

// A crash of the worker in the middle of an export: the attempt is lost,
// and the step rescued (Export allows two rescues).
func TestDemo_ACrashedExportIsRescued(t *testing.T) {
	t.Parallel()
	exporting := make(chan struct{})
	var calls atomic.Int32
	env := tenuretest.New(t, tenuretest.Workflows(ExportOrder),
		tenuretest.Override(Export, func(ctx context.Context, o Order) (string, error) {
			if calls.Add(1) == 1 {
				close(exporting)
				<-ctx.Done() // the worker "dies" here
				return "", ctx.Err()
			}
			return "exported " + o.ID, nil
		}))

	run := tenuretest.Start(env, ExportOrder, Order{ID: "A-17", Amount: 4200})
	select {
	case <-exporting:
	case <-time.After(30 * time.Second):
		t.Fatal("the export never started")
	}
	env.Crash(run.ID)
	if got, err := tenuretest.Result(env, run); err != nil || got != "exported A-17" {
		t.Fatalf("Result = %q, %v", got, err)
	}
	if got, want := env.Timeline(run.ID), []string{"1.1 export lost", "1.2 export succeeded rescue"}; !slices.Equal(got, want) {
		t.Errorf("attempts %v, want %v", got, want)
	}
}

// Charge's policy retries a payment API that answers 503 twice, after
// exponential delays with equal jitter: 200ms, then 400ms, each at least
// half fixed.
func TestDemo_ChargeRetriesWithJitteredBackoff(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	env := tenuretest.New(t, tenuretest.Workflows(PlaceOrder),
		tenuretest.Override(Charge, func(ctx context.Context, o Order) (Receipt, error) {
			if calls.Add(1) <= 2 { // the example's Charge counts its calls for the whole process
				return Receipt{}, errors.New("payment API: 503 service unavailable")
			}
			return Receipt{OrderID: o.ID, Charged: o.Amount}, nil
		}))

	run := tenuretest.Start(env, PlaceOrder, Order{ID: "A-18", Amount: 1999})
	if r, err := tenuretest.Result(env, run); err != nil || r.Charged != 1999 {
		t.Fatalf("Result = %+v, %v", r, err)
	}
	h := env.History(run.ID)
	if got, want := env.Timeline(run.ID), []string{"1.1 charge failed", "1.2 charge failed", "1.3 charge succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("attempts %v, want %v", got, want)
	}
	for i, base := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond} {
		if d := h[i].Delay; d == nil || *d < base/2 || *d > base || h[i].DelaySource != "jitter" {
			t.Errorf("attempt %d: delay %v (%s), want %s to %s from jitter", i+1, d, h[i].DelaySource, base/2, base)
		}
	}
}

// The carrier never accepts the address: three attempts, then a failure row.
func TestDemo_ShipLeavesAFailureRow(t *testing.T) {
	t.Parallel()
	env := tenuretest.New(t, tenuretest.Workflows(ShipOrder))
	run := tenuretest.Start(env, ShipOrder, Order{ID: "A-19", Amount: 500})
	f := env.RequireFailed(run.ID, sdk.ReasonRetriesExhausted)
	if f.Activity != "ship" || f.Attempts != 3 || f.Errors != 3 || f.Rescues != 0 ||
		f.ErrorMessage != "carrier: address of order A-19 not deliverable" {
		t.Errorf("failure row %+v", f)
	}
}
