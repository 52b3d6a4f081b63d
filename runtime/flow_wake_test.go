package runtime_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// notices listens on the schema's runs channel and returns the payloads
// as they come.
func notices(t *testing.T, e *env) <-chan string {
	t.Helper()
	conn, err := pgx.Connect(e.ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(e.ctx, "LISTEN "+pgx.Identifier{e.schema + "_runs"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			select {
			case out <- n.Payload:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = conn.Close(context.Background())
	})
	return out
}

// awaitNotice waits up to 10 s for a notice with payload want, and returns
// the notices before it.
func awaitNotice(t *testing.T, ch <-chan string, want string) []string {
	t.Helper()
	var before []string
	deadline := time.After(10 * time.Second)
	for {
		select {
		case p := <-ch:
			if p == want {
				return before
			}
			before = append(before, p)
		case <-deadline:
			t.Fatalf("no notice %q within 10 s (saw %q)", want, before)
		}
	}
}

// holdThenWait starts wf's run 0, which holds the downstream's one slot
// until first opens, then run 1, and returns them once run 1 waits for
// the slot.
func holdThenWait(t *testing.T, e *env, wf *sdk.Workflow[int, int], first *gate) (a, b *sdk.Run[int]) {
	t.Helper()
	a, err := sdk.Start(e.ctx, e.client, wf, 0)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first run holding the slot", func() bool { return first.waiting.Load() == 1 })
	b, err = sdk.Start(e.ctx, e.client, wf, 1)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second run waiting for the slot", func() bool {
		return fscalar[int](e, `SELECT count(*) FROM {schema}.flow_waiters WHERE run_id = $1`, b.ID) == 1
	})
	return a, b
}

// A run woken by a give of capacity on the fast path is announced to the
// worker whose attempt gave it ("woke:<label>"), not to every worker:
// under a limit that binds, every worker's claimer answered every release.
// That worker claims it at once; when it does not take it (here its one
// slot runs the giver's next step), another worker claims it soon after
// the notice (wokeElsewhere), not at its next poll (a minute here).
func TestFlow_ARunAGiveWakesIsAnnouncedToTheGiver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ds := flow.New("one-at-a-time", flow.Concurrency(1))
	first, next := newGate(e), newGate(e)
	act := activities.New("call-one", func(ctx context.Context, n int) (int, error) {
		if n == 0 {
			first.wait()
		}
		return n, nil
	}, policy.MaxAttempts(1)).Calls(ds, nil)
	after := activities.New("after-the-call", func(ctx context.Context, n int) (int, error) {
		if n == 0 {
			next.wait() // the giver's slot stays busy
		}
		return n, nil
	}, policy.MaxAttempts(1))
	wf := sdk.NewWorkflow("calls-one", func(ctx context.Context, n int) (int, error) {
		if _, err := sdk.Execute(ctx, act, n); err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, after, n)
	})
	ch := notices(t, e)
	for _, label := range []string{"giver-a", "giver-b"} {
		cfg := e.config()
		cfg.Label, cfg.Concurrency, cfg.PollInterval = label, 1, time.Minute // no poll: only notices claim
		e.worker(cfg, wf)
	}
	a, b := holdThenWait(t, e, wf, first)
	giver := fscalar[string](e, `SELECT worker FROM {schema}.attempts WHERE run_id = $1 AND step = 1`, a.ID)
	first.release()
	if seen := awaitNotice(t, ch, "woke:"+giver); len(seen) > 0 {
		t.Logf("notices before the wake's: %q", seen)
	}
	eventually(t, "the woken run completed while the giver's slot is busy", func() bool {
		return fscalar[string](e, `SELECT status FROM {schema}.runs WHERE id = $1`, b.ID) == "completed"
	})
	if next.waiting.Load() != 1 {
		t.Fatal("the giver's run is not in its next step: its slot was not busy")
	}
	if w := fscalar[string](e, `SELECT worker FROM {schema}.attempts WHERE run_id = $1 AND step = 1`, b.ID); w == giver {
		t.Errorf("the woken run's call ran on %s, whose one slot was busy", w)
	}
	next.release()
	if _, err := result(t, a); err != nil {
		t.Fatal(err)
	}
}

// A worker whose LISTEN does not hear notices (its ListenConfig goes
// through a transaction pooler) never names itself in the notices of the
// runs its gives wake: no one would hear them, and the woken run would
// wait for another worker's later claim or the next poll. They are
// announced to every worker, as a worker that does not listen announces
// them.
func TestFlow_AWorkerThatCannotListenAnnouncesItsWakesToAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pooled, err := pgx.ParseConfig(pgtest.Pgbouncer(t, pgtest.URL(t), "transaction") + "&default_query_exec_mode=simple_protocol")
	if err != nil {
		t.Fatal(err)
	}
	ds := flow.New("one-at-a-time", flow.Concurrency(1))
	first := newGate(e)
	act := activities.New("call-one", func(ctx context.Context, n int) (int, error) {
		if n == 0 {
			first.wait()
		}
		return n, nil
	}, policy.MaxAttempts(1)).Calls(ds, nil)
	wf := sdk.NewWorkflow("calls-one", func(ctx context.Context, n int) (int, error) {
		return sdk.Execute(ctx, act, n)
	})
	ch := notices(t, e)
	var log logBuffer
	cfg := e.config()
	cfg.Label, cfg.ListenConfig, cfg.Logger = "deaf", pooled, log.logger()
	cfg.PollInterval = 200 * time.Millisecond // it finds its runs by polling
	e.worker(cfg, wf)
	eventually(t, "the worker's warning that its notices do not arrive", func() bool {
		return strings.Contains(log.String(), "do not arrive")
	})
	a, b := holdThenWait(t, e, wf, first)
	for drained := false; !drained; {
		select {
		case <-ch:
		default:
			drained = true
		}
	}
	first.release()
	for _, r := range []*sdk.Run[int]{a, b} {
		if _, err := result(t, r); err != nil {
			t.Fatalf("run %s: %v", r.ID, err)
		}
	}
	var seen []string
	for drained := false; !drained; {
		select {
		case p := <-ch:
			seen = append(seen, p)
		case <-time.After(100 * time.Millisecond):
			drained = true
		}
	}
	// The notice that matters is the one missing: other statements
	// notify every worker too (''), so the second check only says that
	// the wake was announced at all.
	if slices.Contains(seen, "woke:deaf") {
		t.Fatalf("the woken run was announced to the worker that cannot hear it: %q", seen)
	}
	if !slices.Contains(seen, "") {
		t.Fatalf("the woken run was not announced to every worker: %q", seen)
	}
}
