package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/tenuretest"
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
func TestPoisonPill_RunsQuietlyAsGoRunRunsIt(t *testing.T) {
	t.Parallel()
	out := exampledb.RunProgram(t, 3*time.Minute)
	for _, want := range []string{
		"cat.png: \"thumbnail of cat.png\"",
		"poison.png quarantined by worker-",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the program's output lacks %q:\n%s", want, out)
		}
	}
}

// The program as go run runs it, in a schema of the kit's: worker processes
// that the poison really kills with SIGKILL, one after the other.
func TestPoisonPill_QuarantinedByTheRescueBudget(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := tenuretest.New(t) // a schema of the test's own (run recreates it), dropped after the test
	var out bytes.Buffer
	o, err := run(t.Context(), &out, tenuretest.URL(t), env.Schema, self)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	f := env.RequireFailed(uuid.MustParse(o.poison), sdk.ReasonRescuesExhausted)
	if f.Activity != "decode-image" || f.Attempts != 3 {
		t.Errorf("failure %+v, want decode-image after three attempts", f)
	}
	// MaxRescues(2): three attempts lost, each on another worker; the fourth
	// worker quarantines the run without running it again.
	if o.killed != 3 || o.workers != 4 {
		t.Errorf("%d workers started, %d killed; want 4 and 3", o.workers, o.killed)
	}
	var got []string
	for _, a := range env.History(uuid.MustParse(o.poison)) {
		got = append(got, string(a.Status)+"@"+a.Worker)
	}
	if strings.Join(got, " ") != "lost@worker-1 lost@worker-2 lost@worker-3" {
		t.Errorf("attempts %v", got)
	}
	if !strings.Contains(out.String(), "failures requeue") {
		t.Errorf("output:\n%s", out.String())
	}
}

// The same budget, in this process: three crashes of the worker in the
// middle of decoding (Crash) quarantine the run; healthy work goes on meanwhile.
func TestPoisonPill_TheThirdCrashQuarantinesTheRun(t *testing.T) {
	t.Parallel()
	decoding := make(chan struct{}, 4)
	env := tenuretest.New(t, tenuretest.Workflows(Thumbnail),
		tenuretest.Override(Decode, func(ctx context.Context, img Image) (string, error) {
			if img.Name == "poison.png" {
				decoding <- struct{}{}
				<-ctx.Done() // the worker "dies" here
				return "", ctx.Err()
			}
			return "thumbnail of " + img.Name, nil
		}))

	poison := tenuretest.Start(env, Thumbnail, Image{Name: "poison.png"})
	for i := range 3 {
		select {
		case <-decoding:
		case <-time.After(30 * time.Second):
			t.Fatalf("no attempt started: %v", env.Timeline(poison.ID))
		}
		if i == 0 { // while the poison is being decoded
			healthy := tenuretest.Start(env, Thumbnail, Image{Name: "cat.png"})
			if thumb, err := tenuretest.Result(env, healthy); err != nil || thumb != "thumbnail of cat.png" {
				t.Errorf("Result = %q, %v", thumb, err)
			}
		}
		env.Crash(poison.ID)
	}
	f := env.RequireFailed(poison.ID, sdk.ReasonRescuesExhausted)
	if f.Activity != "decode-image" || f.Attempts != 3 {
		t.Errorf("failure %+v, want decode-image after three attempts", f)
	}
	want := []string{"1.1 decode-image lost", "1.2 decode-image lost rescue", "1.3 decode-image lost rescue"}
	if got := env.Timeline(poison.ID); !slices.Equal(got, want) {
		t.Errorf("attempts %v, want %v", got, want)
	}
}
