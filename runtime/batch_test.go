package runtime_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// Under group commit, an at-most-once attempt's row is still committed
// before its function is invoked: the function itself reads it, from
// another connection, as committed data.
func TestBatching_AtMostOnceAttemptRowIsCommittedBeforeItsCall(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var problems []string
	check := func(ctx context.Context, what string) {
		info, _ := activities.InfoFrom(ctx)
		var status string
		err := e.pool.QueryRow(ctx, fmt.Sprintf(`SELECT status FROM %s.attempts WHERE run_id = $1 AND step = $2 AND attempt = $3`, e.schema),
			info.RunID, info.Step, info.Attempt).Scan(&status)
		if err != nil || status != "running" {
			mu.Lock()
			problems = append(problems, fmt.Sprintf("%s step %d of %s: attempt row %q, %v", what, info.Step, info.RunID, status, err))
			mu.Unlock()
		}
	}
	once := activities.New("charge", func(ctx context.Context, x in) (int, error) {
		check(ctx, "at-most-once")
		return x.N + 1, nil
	}, policy.AtMostOnce())
	plain := activities.New("notify", func(ctx context.Context, x in) (int, error) {
		check(ctx, "at-least-once")
		return x.N + 1, nil
	})
	wf := sdk.NewWorkflow("pay", func(ctx context.Context, x in) (int, error) {
		n, err := sdk.Execute(ctx, once, x)
		if err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, plain, in{N: n})
	})
	const runs = 60
	var started []*sdk.Run[int]
	for i := range runs {
		r, err := sdk.Start(e.ctx, e.client, wf, in{N: i})
		if err != nil {
			t.Fatal(err)
		}
		started = append(started, r)
	}
	cfg := e.config()
	cfg.Concurrency = runs // every run at once: their writes share commits
	w := e.worker(cfg, wf)
	for i, r := range started {
		if out, err := result(t, r); err != nil || out != i+2 {
			t.Fatalf("run %d: %d, %v", i, out, err)
		}
	}
	if len(problems) > 0 {
		t.Fatalf("%d attempts invoked before their row was committed, e.g. %s", len(problems), problems[0])
	}
	st := w.Stats()
	if st.Commits >= st.Writes {
		t.Fatalf("%d writes in %d commits: want runs to share commits", st.Writes, st.Commits)
	}
	t.Logf("%d runs: %d writes in %d commits", runs, st.Writes, st.Commits)
	// Every step completed, every attempt closed, each step once.
	if got := scalar[int](e, fmt.Sprintf(`SELECT count(*) FROM %s.attempts WHERE status = 'succeeded'`, e.schema)); got != 2*runs {
		t.Fatalf("%d succeeded attempts, want %d", got, 2*runs)
	}
	if got := scalar[int](e, fmt.Sprintf(`SELECT count(*) FROM %s.steps WHERE status = 'completed'`, e.schema)); got != 2*runs {
		t.Fatalf("%d completed steps, want %d", got, 2*runs)
	}
}

// outcomes is an Observer that records how attempts ended.
type outcomes struct {
	mu    sync.Mutex
	ended []string
}

func (o *outcomes) SegmentStarted(ctx context.Context, _ runtime.Segment) context.Context { return ctx }
func (o *outcomes) SegmentEnded(context.Context, runtime.Segment, runtime.SegmentEnd)     {}
func (o *outcomes) AttemptStarted(ctx context.Context, _ runtime.Attempt) (context.Context, runtime.TraceRef) {
	return ctx, runtime.TraceRef{}
}
func (o *outcomes) AttemptEnded(_ context.Context, a runtime.Attempt, end runtime.AttemptEnd) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended = append(o.ended, fmt.Sprintf("%s#%d:%s", a.Activity, a.Attempt, end.Outcome))
}
func (o *outcomes) AttemptLost(context.Context, runtime.Attempt, time.Time, runtime.TraceRef) {}
func (o *outcomes) LeaseLost(context.Context, runtime.Segment)                                {}

func (o *outcomes) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ended)
}

// An attempt is reported succeeded only once its success is recorded: when
// the checkpoint is refused because the lease moved on, the observer hears
// that the attempt was lost, for a checkpoint written at once (at-most-once)
// as for one deferred to the run's next write.
func TestObserver_AttemptWhoseCheckpointIsRefusedIsReportedLost(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []policy.Option
	}{
		{"at-most-once, checkpointed at once", []policy.Option{policy.AtMostOnce()}},
		{"at-least-once, checkpoint deferred", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			g := newGate(e)
			act := activities.New("charge", func(ctx context.Context, x in) (int, error) {
				g.wait() // returns success after its lease was ended
				return x.N, nil
			}, c.opts...)
			wf := oneStep(act)
			obs := &outcomes{}
			cfg := e.slowHeartbeat() // only the checkpoint can find the lease gone
			cfg.Observer = obs
			w := e.worker(cfg, wf)
			r, err := sdk.Start(e.ctx, e.client, wf, in{N: 1})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, "the attempt running", func() bool { return g.waiting.Load() == 1 })
			if err := e.store.ExpireLease(e.ctx, r.ID); err != nil {
				t.Fatal(err)
			}
			g.release()
			eventually(t, "the worker finds its lease gone", func() bool { return w.Stats().LeasesLost == 1 })
			eventually(t, "the attempt reported", func() bool { return len(obs.list()) >= 1 })
			// (The worker then reclaims the run: a rescue attempt may follow.)
			if got := obs.list(); got[0] != "charge#1:lost" {
				t.Fatalf("observer heard %v, want the refused attempt reported lost", got)
			}
		})
	}
}

// An activity that ends its goroutine instead of returning (runtime.Goexit,
// as t.FailNow does) ends no attempt of its own: the observer still hears
// of the attempt, lost, and then of the rescue that completes the step.
func TestObserver_AttemptWhoseActivityExitsItsGoroutineIsReportedLost(t *testing.T) {
	e := newEnv(t)
	act := activities.New("quit", func(ctx context.Context, x in) (int, error) {
		if info, _ := activities.InfoFrom(ctx); info.Attempt == 1 {
			goruntime.Goexit()
		}
		return x.N, nil
	})
	wf := oneStep(act)
	obs := &outcomes{}
	cfg := e.config()
	cfg.Observer = obs
	e.worker(cfg, wf)
	r, err := sdk.Start(e.ctx, e.client, wf, in{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the attempt reported", func() bool { return len(obs.list()) >= 1 })
	if got := obs.list(); got[0] != "quit#1:lost" {
		t.Fatalf("observer heard %v, want the attempt whose goroutine ended reported lost", got)
	}
	if err := e.store.ExpireLease(e.ctx, r.ID); err != nil { // its goroutine is gone: no need to wait for the lease
		t.Fatal(err)
	}
	if out, err := result(t, r); err != nil || out != 1 {
		t.Fatalf("after the rescue: %d, %v; want the step completed", out, err)
	}
}
