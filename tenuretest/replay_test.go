package tenuretest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/tenuretest"
)

// The proof of the replay kit: 200 runs of v1 parked in a 1-hour
// sleep after four steps. A v2 that swaps steps 3 and 4 fails the replay of
// every exported history at step 3; behind a patch it replays all of them;
// a v3 that changes step 2's argument fails every replay at step 2. No
// activity is invoked by any replay.
func TestReplay_ExportedHistoriesAgainstNewCode(t *testing.T) {
	t.Parallel()
	var invoked atomic.Int32
	step := func(name string) *activities.Activity[int, int] {
		return activities.New(name, func(ctx context.Context, n int) (int, error) { invoked.Add(1); return n + 1, nil })
	}
	a, b, c, d := step("a"), step("b"), step("c"), step("d")
	call := func(ctx context.Context, act *activities.Activity[int, int], n int) int {
		out, err := sdk.Execute(ctx, act, n)
		if err != nil {
			panic(err)
		}
		return out
	}
	version := func(body func(ctx context.Context, n int) int) *sdk.Workflow[int, int] {
		return sdk.NewWorkflow("four-steps", func(ctx context.Context, n int) (int, error) {
			n = body(ctx, n)
			if err := sdk.Sleep(ctx, time.Hour); err != nil {
				return 0, err
			}
			return n, nil
		})
	}
	v1 := version(func(ctx context.Context, n int) int {
		return call(ctx, d, call(ctx, c, call(ctx, b, call(ctx, a, n))))
	})
	env := tenuretest.New(t, tenuretest.Workflows(v1))
	const runs = 200
	var started []*sdk.Run[int]
	for i := range runs {
		started = append(started, tenuretest.Start(env, v1, i))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var parked int
		if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+env.Schema+`.steps WHERE kind = 'sleep'`).Scan(&parked); err != nil {
			t.Fatal(err)
		}
		if parked == runs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs parked in their sleep", parked, runs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Exported as tenure runs export writes them, and read back.
	var file bytes.Buffer
	enc := json.NewEncoder(&file)
	for _, r := range started {
		h, err := env.Operator.ExportHistory(context.Background(), r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.Encode(h); err != nil {
			t.Fatal(err)
		}
	}
	histories, err := tenuretest.ReadHistories(&file)
	if err != nil || len(histories) != runs {
		t.Fatalf("read %d histories, %v", len(histories), err)
	}
	before := invoked.Load()

	tenuretest.Replay(t, v1, histories...) // the code they ran replays them all
	failAt := func(wf *sdk.Workflow[int, int], step int, what string) {
		t.Helper()
		for _, h := range histories {
			err := tenuretest.ReplayHistory(wf, h)
			var div *tenuretest.Divergence
			if !errors.As(err, &div) || div.Step != step || div.RunID != h.RunID || !strings.Contains(err.Error(), what) {
				t.Fatalf("replay of run %s: %v; want a divergence at step %d naming %s", h.RunID, err, step, what)
			}
		}
	}
	swapped := version(func(ctx context.Context, n int) int {
		return call(ctx, c, call(ctx, d, call(ctx, b, call(ctx, a, n))))
	})
	failAt(swapped, 3, `now activity "d"`)
	patched := version(func(ctx context.Context, n int) int {
		n = call(ctx, b, call(ctx, a, n))
		if sdk.Patched(ctx, "swap-c-d") {
			return call(ctx, c, call(ctx, d, n))
		}
		return call(ctx, d, call(ctx, c, n))
	})
	tenuretest.Replay(t, patched, histories...)
	argument := version(func(ctx context.Context, n int) int {
		return call(ctx, d, call(ctx, c, call(ctx, b, call(ctx, a, n)+1)))
	})
	failAt(argument, 2, "input hash")
	if n := invoked.Load(); n != before {
		t.Fatalf("the replays invoked %d activities, want none", n-before)
	}
}

// A history of another workflow or format is refused; a workflow that
// returns before its recorded steps, or with another output, diverges.
func TestReplay_RefusesWhatItCannotReplay(t *testing.T) {
	t.Parallel()
	wf := sdk.NewWorkflow("short", func(ctx context.Context, n int) (int, error) { return n, nil })
	h := record.History{Format: record.HistoryFormat, Workflow: "short", Status: record.RunCompleted, Input: []byte(`1`), Output: []byte(`1`)}
	if err := tenuretest.ReplayHistory(wf, h); err != nil {
		t.Fatalf("a run with no step: %v", err)
	}
	for name, mod := range map[string]func(*record.History){
		"another workflow": func(h *record.History) { h.Workflow = "other" },
		"another format":   func(h *record.History) { h.Format = "v0" },
		"more steps": func(h *record.History) {
			h.Steps = []record.HistoryStep{{Step: 1, Kind: record.KindNow, Name: "now", Status: record.StepCompleted}}
		},
		"another output": func(h *record.History) { h.Output = []byte(`2`) },
	} {
		x := h
		mod(&x)
		if err := tenuretest.ReplayHistory(wf, x); err == nil {
			t.Errorf("%s: replayed without an error", name)
		}
	}
	// New code that panics, or returns an error where the run completed.
	for name, body := range map[string]func(context.Context, int) (int, error){
		"a panic":  func(context.Context, int) (int, error) { panic("boom") },
		"an error": func(context.Context, int) (int, error) { return 0, errors.New("nope") },
	} {
		if err := tenuretest.ReplayHistory(sdk.NewWorkflow("short", body), h); err == nil || !strings.Contains(err.Error(), "the workflow") {
			t.Errorf("%s: %v, want a divergence", name, err)
		}
	}
}
