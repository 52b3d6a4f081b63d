package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/sdk"
)

// An idle worker that hears the notices claims each run once, on its
// notice: a run's end does not send a claim that finds nothing.
func TestClaims_AnIdleWorkerClaimsOncePerRunNotAgainAtItsEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	act := activities.New("claims-idle", func(_ context.Context, x in) (int, error) { return x.N, nil })
	wf := oneStep(act)
	counter := &matching{substr: "WITH pairs AS"} // the claim statement
	cfg := e.config()
	cfg.PollInterval = time.Hour // no poll within the test: every claim is a notice's or a run's end's
	e.workerOn(e.tracedPool(t, counter), cfg, wf)
	one := func(n int) {
		t.Helper()
		r, err := sdk.Start(e.ctx, e.client, wf, in{N: n})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := result(t, r); err != nil || out != n {
			t.Fatalf("run %d: %d, %v", n, out, err)
		}
	}
	// Until the listener has checked that its LISTEN hears (its own
	// notice), every run's end claims: wait for a run that costs one.
	eventually(t, "a run that costs one claim", func() bool {
		before := counter.n.Load()
		one(0)
		return counter.n.Load()-before == 1
	})
	before := counter.n.Load()
	const runs = 20
	for i := 1; i <= runs; i++ {
		one(i)
	}
	// One claim per run, and a few for notices that arrive while a claim is
	// in flight (each leaves a wake-up for one more). Before, every run's
	// end claimed again: 2 a run.
	if got := counter.n.Load() - before; got > runs+runs/4 {
		t.Fatalf("%d claims for %d runs started one at a time, want about one a run", got, runs)
	}
}

// A worker whose claim filled its free slots claims again as soon as a run
// ends: the runs left behind were announced before it could take them.
func TestClaims_AFullWorkerClaimsAgainWhenARunEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	act := activities.New("claims-full", func(_ context.Context, x in) (int, error) { return x.N, nil })
	wf := oneStep(act)
	const runs = 5
	var started []*sdk.Run[int]
	for i := range runs {
		r, err := sdk.Start(e.ctx, e.client, wf, in{N: i})
		if err != nil {
			t.Fatal(err)
		}
		started = append(started, r)
	}
	cfg := e.config()
	cfg.Concurrency = 1
	cfg.PollInterval = time.Hour
	e.worker(cfg, wf)
	for i, r := range started {
		if out, err := result(t, r); err != nil || out != i {
			t.Fatalf("run %d: %d, %v", i, out, err)
		}
	}
}

// A worker that does not hear the notices (PollOnly, a transaction pooler)
// claims at each run's end: a run started while it was busy is taken then,
// not at the next poll.
func TestClaims_AWorkerThatHearsNoNoticeClaimsWhenARunEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newGate(e)
	act := activities.New("claims-deaf", func(ctx context.Context, x in) (int, error) {
		if x.N == 0 {
			g.wait()
		}
		return x.N, nil
	})
	wf := oneStep(act)
	first, err := sdk.Start(e.ctx, e.client, wf, in{N: 0})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.Concurrency = 2 // its first claim finds one run for two slots
	cfg.PollInterval = time.Hour
	cfg.PollOnly = true
	e.worker(cfg, wf)
	eventually(t, "the first run's call", func() bool { return g.waiting.Load() == 1 })
	second, err := sdk.Start(e.ctx, e.client, wf, in{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	g.release()
	for i, r := range []*sdk.Run[int]{first, second} {
		if out, err := result(t, r); err != nil || out != i {
			t.Fatalf("run %d: %d, %v", i, out, err)
		}
	}
}
