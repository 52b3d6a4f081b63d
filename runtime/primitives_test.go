package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/faultproxy"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// timelineRow is one row of the step_timeline view.
type timelineRow struct {
	step   int
	kind   string
	name   string
	status string
}

func (e *env) timeline(id uuid.UUID) []string {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, fmt.Sprintf(`SELECT step, kind, name, status FROM %s.step_timeline WHERE run_id = $1 ORDER BY step`, e.schema), id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r timelineRow
		if err := rows.Scan(&r.step, &r.kind, &r.name, &r.status); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d %s %s %s", r.step, r.kind, r.name, r.status))
	}
	return out
}

func (e *env) exec(query string, args ...any) int64 {
	e.t.Helper()
	tag, err := e.pool.Exec(e.ctx, strings.ReplaceAll(query, "{schema}", e.schema), args...)
	if err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return tag.RowsAffected()
}

func q[T any](e *env, query string, args ...any) T {
	e.t.Helper()
	return scalar[T](e, strings.ReplaceAll(query, "{schema}", e.schema), args...)
}

var count = activities.New("count", func(ctx context.Context, n int) (int, error) { return n + 1, nil })

// A short sleep is served in process; a long one releases the lease and is
// a queued run due at the sleep's due time, fixed at its first execution: a
// replay does not extend it, and moving it in SQL wakes the run.
func TestSleep_ShortInProcessLongDurableMovedInSQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := sdk.NewWorkflow("sleeper", func(ctx context.Context, d time.Duration) (int, error) {
		n, err := sdk.Execute(ctx, count, 0)
		if err != nil {
			return 0, err
		}
		if err := sdk.Sleep(ctx, d); err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, count, n)
	})
	w := e.worker(e.config(), wf)

	short, _ := sdk.Start(e.ctx, e.client, wf, 30*time.Millisecond)
	if out, err := result(t, short); err != nil || out != 2 {
		t.Fatalf("short sleep: %d, %v", out, err)
	}
	if got := e.timeline(short.ID); !slices.Equal(got, []string{"1 activity count completed", "2 sleep sleep completed", "3 activity count completed"}) {
		t.Fatalf("timeline %v", got)
	}
	if slept := q[float64](e, `SELECT extract(epoch FROM woke_at - started_at) * 1000 FROM {schema}.step_timeline WHERE run_id = $1 AND step = 2`, short.ID); slept < 30 {
		t.Fatalf("slept %.1f ms, want at least 30", slept)
	}

	long, _ := sdk.Start(e.ctx, e.client, wf, 2*time.Hour)
	eventually(t, "the long sleep to release its lease", func() bool {
		return q[string](e, `SELECT coalesce(waiting_for, '') FROM {schema}.runs WHERE id = $1`, long.ID) == "sleep"
	})
	if st := e.runStatus(long.ID); st != "queued" {
		t.Fatalf("sleeping run is %s, want queued", st)
	}
	if n := q[int](e, `SELECT count(*) FROM {schema}.in_flight WHERE run_id = $1`, long.ID); n != 0 {
		t.Fatal("a durably sleeping run holds a lease")
	}
	due := q[time.Time](e, `SELECT due_at FROM {schema}.steps WHERE run_id = $1 AND step = 2`, long.ID)
	if left := time.Until(due); left < 119*time.Minute || left > 121*time.Minute {
		t.Fatalf("due in %s, want 2h", left)
	}
	if !q[bool](e, `SELECT run_after = (SELECT due_at FROM {schema}.steps WHERE run_id = $1 AND step = 2) FROM {schema}.runs WHERE id = $1`, long.ID) {
		t.Fatal("run_after is not the sleep's due time")
	}
	// A replay (the run made due early, its sleep not) does not extend it:
	// the worker finds the due time recorded and suspends again until it.
	e.exec(`UPDATE {schema}.runs SET run_after = now() WHERE id = $1`, long.ID)
	eventually(t, "the early replay to suspend again", func() bool {
		return q[bool](e, `SELECT run_after > now() + interval '1 hour' FROM {schema}.runs WHERE id = $1`, long.ID)
	})
	if again := q[time.Time](e, `SELECT due_at FROM {schema}.steps WHERE run_id = $1 AND step = 2`, long.ID); !again.Equal(due) {
		t.Fatalf("replay moved the due time from %s to %s", due, again)
	}
	// An operator moves the due time: the run wakes and completes.
	e.exec(`UPDATE {schema}.steps SET due_at = now() WHERE run_id = $1 AND step = 2`, long.ID)
	e.exec(`UPDATE {schema}.runs SET run_after = now() WHERE id = $1`, long.ID)
	if out, err := result(t, long); err != nil || out != 2 {
		t.Fatalf("long sleep: %d, %v", out, err)
	}
	if got := e.timeline(long.ID); !slices.Equal(got, []string{"1 activity count completed", "2 sleep sleep completed", "3 activity count completed"}) {
		t.Fatalf("timeline of the long sleep %v", got)
	}
	if n := q[int](e, `SELECT count(*) FROM {schema}.attempts WHERE run_id = $1 AND step = 1`, long.ID); n != 1 {
		t.Fatalf("step 1 ran %d times across the suspensions, want once", n)
	}
	if st := w.Stats(); st.Suspended < 2 || st.LeasesLost != 0 {
		t.Fatalf("stats %+v", st)
	}
}

type approval struct {
	By string `json:"by"`
}

// Signals: one sent before Receive is kept; two of one name are consumed in
// shipment, once each; a run waiting holds no lease and a send wakes it; a
// timeout is a typed error; sending to a finished or unknown run is an
// error.
func TestSignal_KeptOrderedOnceAndWakesTheRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := sdk.NewWorkflow("approvals", func(ctx context.Context, n int) ([]string, error) {
		var got []string
		for range n {
			a, err := sdk.Receive[approval](ctx, "approve", 0)
			if err != nil {
				return nil, err
			}
			got = append(got, a.By)
		}
		if _, err := sdk.Receive[approval](ctx, "approve", 200*time.Millisecond); !errors.Is(err, sdk.ErrTimeout) {
			return nil, fmt.Errorf("third receive: %v, want a timeout", err)
		}
		return got, nil
	})
	// Sent before any worker runs the workflow: kept.
	r, _ := sdk.Start(e.ctx, e.client, wf, 2)
	if err := e.client.Send(e.ctx, r.ID, "approve", approval{By: "ann"}); err != nil {
		t.Fatal(err)
	}
	w := e.worker(e.config(), wf)
	eventually(t, "the run to wait for its second signal", func() bool {
		return q[string](e, `SELECT coalesce(waiting_for, '') FROM {schema}.runs WHERE id = $1`, r.ID) == "signal:approve"
	})
	if n := q[int](e, `SELECT count(*) FROM {schema}.in_flight WHERE run_id = $1`, r.ID); n != 0 {
		t.Fatal("a run waiting for a signal holds a lease")
	}
	if w := q[string](e, `SELECT waiting_for FROM {schema}.waiting_runs WHERE run_id = $1 AND wakes_at IS NULL`, r.ID); w != "signal:approve" {
		t.Fatalf("waiting_runs says %q", w)
	}
	// The second, in the caller's transaction and through SQL.
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.client.SendTx(e.ctx, tx, r.ID, "approve", approval{By: "bob"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	out, err := result(t, r)
	if err != nil || !slices.Equal(out, []string{"ann", "bob"}) {
		t.Fatalf("result %v, %v; want [ann bob]", out, err)
	}
	if n := q[int](e, `SELECT count(*) FROM {schema}.signals WHERE run_id = $1 AND consumed_step IS NOT NULL`, r.ID); n != 2 {
		t.Fatalf("%d signals consumed, want 2", n)
	}
	if got := e.timeline(r.ID); !slices.Equal(got, []string{"1 signal approve completed", "2 signal approve completed", "3 signal approve failed"}) {
		t.Fatalf("timeline %v", got)
	}
	if err := e.client.Send(e.ctx, r.ID, "approve", approval{}); !errors.Is(err, sdk.ErrFinished) {
		t.Fatalf("send to a finished run: %v, want ErrFinished", err)
	}
	if err := e.client.Send(e.ctx, uuid.New(), "approve", approval{}); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("send to an unknown run: %v, want ErrNotFound", err)
	}
	if st := w.Stats(); st.LeasesLost != 0 {
		t.Fatalf("stats %+v", st)
	}

	// The SQL function, as an operator would call it.
	r2, _ := sdk.Start(e.ctx, e.client, wf, 1)
	if id := q[int64](e, `SELECT {schema}.send_signal($1, 'approve', '{"by": "sql"}')`, r2.ID); id <= 0 {
		t.Fatalf("send_signal returned %d", id)
	}
	if out, err := result(t, r2); err != nil || !slices.Equal(out, []string{"sql"}) {
		t.Fatalf("result %v, %v", out, err)
	}
}

// Events are set by the workflow and read outside it, waiting for them.
func TestEvent_SetInTheWorkflowReadOutside(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := sdk.NewWorkflow("progress", func(ctx context.Context, n int) (int, error) {
		if err := sdk.SetEvent(ctx, "progress", 50); err != nil {
			return 0, err
		}
		if _, err := sdk.Receive[int](ctx, "go", 0); err != nil {
			return 0, err
		}
		return n, sdk.SetEvent(ctx, "progress", 100)
	})
	r, _ := sdk.Start(e.ctx, e.client, wf, 1)
	if _, err := sdk.GetEvent[int](e.ctx, e.client, r.ID, "progress", 0); !errors.Is(err, sdk.ErrTimeout) {
		t.Fatalf("GetEvent before the event: %v, want ErrTimeout", err)
	}
	e.worker(e.config(), wf)
	if v, err := sdk.GetEvent[int](e.ctx, e.client, r.ID, "progress", 10*time.Second); err != nil || v != 50 {
		t.Fatalf("GetEvent: %d, %v", v, err)
	}
	if err := e.client.Send(e.ctx, r.ID, "go", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, r); err != nil {
		t.Fatal(err)
	}
	if v, err := sdk.GetEvent[int](e.ctx, e.client, r.ID, "progress", 0); err != nil || v != 100 {
		t.Fatalf("GetEvent after the run: %d, %v", v, err)
	}
	if v := q[string](e, `SELECT value::text FROM {schema}.events WHERE run_id = $1 AND key = 'progress'`, r.ID); v != "100" {
		t.Fatalf("events row %s", v)
	}
	if _, err := sdk.GetEvent[int](e.ctx, e.client, r.ID, "never", 5*time.Second); !errors.Is(err, sdk.ErrFinished) {
		t.Fatalf("GetEvent of an event a finished run never set: %v, want ErrFinished", err)
	}
}

// Now and SideEffect are recorded once: a replay after a lost lease returns
// the recorded values without calling the function again.
func TestNowAndSideEffect_RecordedOnceAndReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls atomic.Int32
	g := newGate(e)
	hold := activities.New("hold", func(ctx context.Context, x int) (int, error) {
		if info, _ := activities.InfoFrom(ctx); info.Attempt == 1 {
			g.wait() // the lease is ended meanwhile; this attempt is lost
		}
		return x, nil
	})
	type seen struct {
		Now    time.Time `json:"now"`
		Random int       `json:"random"`
	}
	var first atomic.Value
	wf := sdk.NewWorkflow("recorded", func(ctx context.Context, _ int) (seen, error) {
		now, err := sdk.Now(ctx)
		if err != nil {
			return seen{}, err
		}
		r, err := sdk.SideEffect(ctx, func() (int, error) { calls.Add(1); return rand.IntN(1 << 30), nil })
		if err != nil {
			return seen{}, err
		}
		first.CompareAndSwap(nil, seen{now, r})
		if _, err := sdk.Execute(ctx, hold, 1); err != nil {
			return seen{}, err
		}
		return seen{now, r}, nil
	})
	e.worker(e.config(), wf)
	r, _ := sdk.Start(e.ctx, e.client, wf, 0)
	eventually(t, "the first attempt to hold", func() bool { return g.waiting.Load() == 1 })
	if err := e.store.ExpireLease(e.ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	out, err := result(t, r)
	g.release()
	if err != nil {
		t.Fatal(err)
	}
	f := first.Load().(seen)
	if !out.Now.Equal(f.Now) || out.Random != f.Random || calls.Load() != 1 {
		t.Fatalf("replayed %+v, first %+v, side effect called %d times; want the recorded values, one call", out, f, calls.Load())
	}
	if got := e.timeline(r.ID); !slices.Equal(got[:2], []string{"1 now now completed", "2 side_effect side_effect completed"}) {
		t.Fatalf("timeline %v", got)
	}
}

type shipment struct {
	ID   int  `json:"id"`
	Fail bool `json:"fail"`
}

var ship = activities.New("ship", func(ctx context.Context, o shipment) (int, error) {
	if o.Fail {
		return 0, fmt.Errorf("order %d: %w", o.ID, errors.New("no stock"))
	}
	return o.ID * 10, nil
})

var shipOne = sdk.NewWorkflow("ship-one", func(ctx context.Context, o shipment) (int, error) {
	return sdk.Execute(ctx, ship, o)
})

// A fan-out of children, one failing: each child's output or typed error
// reaches the parent, the link is in SQL, and the parent waits without a
// lease.
func TestChild_FanOutWithOneFailing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 100
	parent := sdk.NewWorkflow("fan-out", func(ctx context.Context, fail int) ([]string, error) {
		var kids []*sdk.Child[int]
		for i := range n {
			c, err := sdk.StartChild(ctx, shipOne, shipment{ID: i, Fail: i == fail})
			if err != nil {
				return nil, err
			}
			kids = append(kids, c)
		}
		var out []string
		for _, c := range kids {
			v, err := c.Result(ctx)
			var ce *sdk.ChildError
			switch {
			case errors.As(err, &ce):
				out = append(out, fmt.Sprintf("%s:%s", ce.Status, ce.Reason))
			case err != nil:
				return nil, err
			default:
				out = append(out, fmt.Sprint(v))
			}
		}
		return out, nil
	})
	cfg := e.config()
	cfg.Concurrency = 32
	e.worker(cfg, parent, shipOne)
	r, _ := sdk.Start(e.ctx, e.client, parent, 7)
	out, err := result(t, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != n || out[7] != "failed:retries_exhausted" || out[8] != "80" {
		t.Fatalf("children's results %v", out)
	}
	if k := q[int](e, `SELECT count(*) FROM {schema}.runs WHERE parent_run_id = $1`, r.ID); k != n {
		t.Fatalf("%d children linked, want %d", k, n)
	}
	if k := q[int](e, `SELECT count(*) FROM {schema}.step_timeline WHERE run_id = $1 AND kind = 'child' AND child_status IN ('completed', 'failed')`, r.ID); k != n {
		t.Fatalf("%d child steps with their child's status, want %d", k, n)
	}
}

// Call returns the child's output; a parent replayed after losing its lease
// starts no second child.
func TestChild_CallAndReplayStartsNoSecondChild(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newGate(e)
	hold := activities.New("hold", func(ctx context.Context, x int) (int, error) {
		if info, _ := activities.InfoFrom(ctx); info.Attempt == 1 {
			g.wait()
		}
		return x, nil
	})
	parent := sdk.NewWorkflow("caller", func(ctx context.Context, id int) (int, error) {
		v, err := sdk.Call(ctx, shipOne, shipment{ID: id})
		if err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, hold, v)
	})
	e.worker(e.config(), parent, shipOne)
	r, _ := sdk.Start(e.ctx, e.client, parent, 4)
	eventually(t, "the parent to hold after its child", func() bool { return g.waiting.Load() == 1 })
	if err := e.store.ExpireLease(e.ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	out, err := result(t, r)
	g.release()
	if err != nil || out != 40 {
		t.Fatalf("result %d, %v", out, err)
	}
	if k := q[int](e, `SELECT count(*) FROM {schema}.runs WHERE parent_run_id = $1`, r.ID); k != 1 {
		t.Fatalf("%d children, want 1", k)
	}
	if k := q[string](e, `SELECT run_key FROM {schema}.runs WHERE parent_run_id = $1`, r.ID); k != "tenure-child:"+r.ID.String()+"/1" {
		t.Fatalf("child key %q", k)
	}
}

// A replay that starts a recorded child with another input is
// nondeterminism at the child's step, and starts no second child.
func TestChild_ReplayWithAnotherInputIsNondeterminism(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := newGate(e)
	var version atomic.Int32
	hold := activities.New("hold", func(ctx context.Context, x int) (int, error) {
		g.wait()
		return x, nil
	})
	parent := sdk.NewWorkflow("caller-changes", func(ctx context.Context, id int) (int, error) {
		v, err := sdk.Call(ctx, shipOne, shipment{ID: id + int(version.Load())})
		if err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, hold, v)
	})
	e.worker(e.config(), parent, shipOne)
	r, _ := sdk.Start(e.ctx, e.client, parent, 4)
	eventually(t, "the parent to hold after its child", func() bool { return g.waiting.Load() == 1 })
	version.Store(1) // a deploy changed the child's input
	if err := e.store.ExpireLease(e.ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	_, err := result(t, r)
	g.release()
	var re *sdk.RunError
	if !errors.As(err, &re) || re.Reason != sdk.ReasonNondeterminism || re.Step != 1 || !strings.Contains(re.Message, "input hash") {
		t.Fatalf("result error %v, want nondeterminism at step 1 naming its input", err)
	}
	if k := q[int](e, `SELECT count(*) FROM {schema}.runs WHERE parent_run_id = $1`, r.ID); k != 1 {
		t.Fatalf("%d children, want 1", k)
	}
}

// Cancel during an activity, during a durable sleep and during a child: the
// activity's context is cancelled with sdk.ErrCancelled, the workflow
// cleans up under Detached, the run ends cancelled with no lease lost, and
// the children are cancelled in turn.
func TestCancel_DuringActivitySleepAndChild(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started := make(chan struct{}, 10)
	var cause atomic.Value
	waits := activities.New("waits", func(ctx context.Context, x int) (int, error) {
		started <- struct{}{}
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return 0, ctx.Err()
	})
	cleanup := activities.New("cleanup", func(ctx context.Context, x int) (int, error) { return x, nil })
	child := sdk.NewWorkflow("child-waits", func(ctx context.Context, x int) (int, error) {
		return sdk.Execute(ctx, waits, x)
	})
	wf := sdk.NewWorkflow("cancellable", func(ctx context.Context, mode string) (int, error) {
		var err error
		switch mode {
		case "activity":
			_, err = sdk.Execute(ctx, waits, 1)
		case "sleep":
			err = sdk.Sleep(ctx, time.Hour)
		case "child":
			_, err = sdk.Call(ctx, child, 1)
		}
		if errors.Is(err, sdk.ErrCancelled) {
			if _, cerr := sdk.Execute(sdk.Detached(ctx), cleanup, 1); cerr != nil {
				return 0, cerr
			}
		}
		return 0, err
	})
	// Heartbeats too rare to carry the cancel: it must come by its notice.
	cfg := e.config()
	cfg.LeaseTTL, cfg.HeartbeatInterval = 60*time.Second, 20*time.Second
	w := e.worker(cfg, wf, child)

	act, _ := sdk.Start(e.ctx, e.client, wf, "activity")
	<-started
	began := time.Now()
	if err := e.client.Cancel(e.ctx, act.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, act); !errors.Is(err, sdk.ErrCancelled) {
		t.Fatalf("cancelled during an activity: %v", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("cancel took %s to reach the activity and end the run: not by its notice (the next heartbeat is 20 s away)", took)
	}
	if c, _ := cause.Load().(error); !errors.Is(c, sdk.ErrCancelled) {
		t.Fatalf("the activity's context cause %v, want sdk.ErrCancelled", c)
	}
	if got := e.statuses(act.ID); !slices.Equal(got, []string{"1.1:cancelled", "2.1:succeeded"}) {
		t.Fatalf("attempts %v: want the cancelled one and the cleanup", got)
	}

	sl, _ := sdk.Start(e.ctx, e.client, wf, "sleep")
	eventually(t, "the run to sleep durably", func() bool {
		return q[string](e, `SELECT coalesce(waiting_for, '') FROM {schema}.runs WHERE id = $1`, sl.ID) == "sleep"
	})
	if err := e.client.Cancel(e.ctx, sl.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, sl); !errors.Is(err, sdk.ErrCancelled) {
		t.Fatalf("cancelled during a sleep: %v", err)
	}
	if got := e.timeline(sl.ID); !slices.Equal(got, []string{"1 sleep sleep waiting", "2 activity cleanup completed"}) {
		t.Fatalf("timeline %v", got)
	}

	ch, _ := sdk.Start(e.ctx, e.client, wf, "child")
	<-started
	if err := e.client.Cancel(e.ctx, ch.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, ch); !errors.Is(err, sdk.ErrCancelled) {
		t.Fatalf("cancelled during a child: %v", err)
	}
	kid := q[uuid.UUID](e, `SELECT id FROM {schema}.runs WHERE parent_run_id = $1`, ch.ID)
	eventually(t, "the child to be cancelled in turn", func() bool { return e.runStatus(kid) == "cancelled" })
	// Counted once its worker has the commit's answer, just after it is visible.
	eventually(t, "the child's end counted", func() bool { return w.Stats().Cancelled == 4 })
	if st := w.Stats(); st.LeasesLost != 0 || st.Cancelled != 4 {
		t.Fatalf("stats %+v: want 4 runs cancelled (3 and the child), no lease lost", st)
	}
}

// A worker that hears no notices (PollOnly, or a pooler) learns of a Cancel
// at its next heartbeat, which reports it at no extra statement.
func TestCancel_PollOnlyWorkerHearsItAtTheHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started := make(chan struct{}, 1)
	waits := activities.New("waits", func(ctx context.Context, x int) (int, error) {
		started <- struct{}{}
		<-ctx.Done()
		return 0, context.Cause(ctx)
	})
	wf := sdk.NewWorkflow("poll-cancel", func(ctx context.Context, x int) (int, error) {
		return sdk.Execute(ctx, waits, x)
	})
	cfg := e.config()
	cfg.PollOnly = true
	cfg.HeartbeatInterval = 200 * time.Millisecond
	w := e.worker(cfg, wf)
	r, _ := sdk.Start(e.ctx, e.client, wf, 1)
	<-started
	if err := e.client.Cancel(e.ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, r); !errors.Is(err, sdk.ErrCancelled) {
		t.Fatalf("result %v, want ErrCancelled", err)
	}
	if got := e.statuses(r.ID); !slices.Equal(got, []string{"1.1:cancelled"}) || w.Stats().LeasesLost != 0 {
		t.Fatalf("attempts %v, stats %+v", got, w.Stats())
	}
}

// statements counts the statements sent on a pool, batched or not, but for
// the planner settings that open each batch in the same round trip (they
// read and write nothing).
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (s *statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if !strings.HasPrefix(d.SQL, "CALL ") || !strings.Contains(d.SQL, ".planner('") {
		s.n.Add(1)
	}
}
func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// 1,000 runs waiting for signals hold no lease and cost their worker no
// statement: per poll interval it sends its one claim, as with none waiting.
func TestSignal_ThousandWaitingRunsHoldNoLeaseAndCostNoStatements(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := sdk.NewWorkflow("waits-for-approval", func(ctx context.Context, n int) (int, error) {
		return sdk.Receive[int](ctx, "approve", 0)
	})
	const runs = 1000
	var many []sdk.StartParams[int]
	for i := range runs {
		many = append(many, sdk.StartParams[int]{Input: i})
	}
	started, err := sdk.StartMany(e.ctx, e.client, wf, many)
	if err != nil {
		t.Fatal(err)
	}
	counter := &statements{}
	pool := e.tracedPool(t, counter)
	wcfg := e.config()
	wcfg.Concurrency = 100
	wcfg.PollInterval = 100 * time.Millisecond
	w, err := runtime.NewWorker(pool, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(wf); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.WithoutCancel(e.ctx)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
	eventually(t, "every run to wait for its signal", func() bool {
		return q[int](e, `SELECT count(*) FROM {schema}.runs WHERE waiting_for = 'signal:approve' AND status = 'queued'`) == runs
	})
	if n := q[int](e, `SELECT count(*) FROM {schema}.in_flight`); n != 0 {
		t.Fatalf("%d runs in flight while all wait for signals", n)
	}
	time.Sleep(300 * time.Millisecond) // the last suspensions' wake-ups settle
	before := counter.n.Load()
	const window = 2 * time.Second
	time.Sleep(window)
	sent := counter.n.Load() - before
	polls := int64(window / wcfg.PollInterval)
	beats := int64(window / wcfg.HeartbeatInterval) // the registry's row, on the heartbeat's connection
	// A window holds up to one tick more of each ticker than its length
	// divided by the interval (polls+1 claims, beats+1 beats), and one claim
	// more may come from a notice of the last suspensions arriving late on
	// a loaded machine (once in CI: 25; 24 at every quiet run, before and
	// after flow control).
	if sent > polls+beats+3 {
		t.Fatalf("%d statements in %s with %d runs waiting, want at most the %d claims of the poll and %d heartbeats", sent, window, runs, polls, beats)
	}
	t.Logf("%d statements in %s (%d polls, %d heartbeats) with %d runs waiting for signals", sent, window, polls, beats, runs)
	// And each still wakes on its send.
	if err := e.client.Send(e.ctx, started[0].ID, "approve", 7); err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, started[0]); err != nil || out != 7 {
		t.Fatalf("woken run: %d, %v", out, err)
	}
}

// A worker holding many runs renews all their leases, and writes its
// registry row, in one statement per heartbeat interval: 100 runs held in
// their activities cost no more statements than none.
func TestHeartbeat_OneStatementPerIntervalWhateverTheWorkerHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	var inside atomic.Int64
	hold := activities.New("hold", func(ctx context.Context, n int) (int, error) {
		inside.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return n, nil
	})
	wf := sdk.NewWorkflow("holds", func(ctx context.Context, n int) (int, error) {
		return sdk.Execute(ctx, hold, n)
	})
	const runs = 100
	var many []sdk.StartParams[int]
	for i := range runs {
		many = append(many, sdk.StartParams[int]{Input: i})
	}
	started, err := sdk.StartMany(e.ctx, e.client, wf, many)
	if err != nil {
		t.Fatal(err)
	}
	counter := &statements{}
	pool := e.tracedPool(t, counter) // the heartbeat's own connection is opened with it too
	wcfg := e.config()
	wcfg.Concurrency = runs
	wcfg.HeartbeatInterval = 100 * time.Millisecond
	wcfg.LeaseTTL = 10 * time.Second
	wcfg.PollInterval = time.Minute // no poll in the window: every slot is taken
	w, err := runtime.NewWorker(pool, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(wf); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.WithoutCancel(e.ctx)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
	eventually(t, "every run to be inside its activity", func() bool { return inside.Load() == runs })
	time.Sleep(200 * time.Millisecond) // the attempts' starts have committed
	before := counter.n.Load()
	const window = 2 * time.Second
	time.Sleep(window)
	sent := counter.n.Load() - before
	beats := int64(window / wcfg.HeartbeatInterval)
	if sent > beats+2 {
		t.Fatalf("%d statements in %s with %d runs held, want at most the %d heartbeats", sent, window, runs, beats)
	}
	if sent < beats/2 {
		t.Fatalf("%d statements in %s: the heartbeat did not beat every %s", sent, window, wcfg.HeartbeatInterval)
	}
	t.Logf("%d statements in %s (%d heartbeats) with %d runs held", sent, window, beats, runs)
	close(release)
	for _, r := range started {
		if _, err := result(t, r); err != nil {
			t.Fatal(err)
		}
	}
}

// Short sleeps are recorded after the fact, with the run's next write: two in
// a row are both in history, with the times they were slept.
func TestSleep_ShortSleepsInARowAreAllRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := sdk.NewWorkflow("naps", func(ctx context.Context, n int) (int, error) {
		for range 2 {
			if err := sdk.Sleep(ctx, 20*time.Millisecond); err != nil {
				return 0, err
			}
		}
		return sdk.Execute(ctx, count, n)
	})
	e.worker(e.config(), wf)
	r, _ := sdk.Start(e.ctx, e.client, wf, 1)
	if out, err := result(t, r); err != nil || out != 2 {
		t.Fatalf("result %d, %v", out, err)
	}
	if got := e.timeline(r.ID); !slices.Equal(got, []string{"1 sleep sleep completed", "2 sleep sleep completed", "3 activity count completed"}) {
		t.Fatalf("timeline %v", got)
	}
	rows, err := e.pool.Query(e.ctx, fmt.Sprintf(`SELECT extract(epoch FROM woke_at - started_at) * 1000, extract(epoch FROM due_at - started_at) * 1000 FROM %s.step_timeline WHERE run_id = $1 AND kind = 'sleep' ORDER BY step`, e.schema), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var slept, due float64
		if err := rows.Scan(&slept, &due); err != nil {
			t.Fatal(err)
		}
		if slept < 15 || slept > 500 || due < 15 || due > 40 {
			t.Errorf("a 20 ms sleep recorded as slept %.1f ms, due %.1f ms after its start", slept, due)
		}
	}
	rows.Close()
}

// A parent that failed because its child failed completes once the child is
// requeued and completes, and the parent is requeued: its child step waits
// for the child again instead of replaying the recorded failure.
func TestChild_RequeueTheChildThenTheParent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var broken atomic.Bool
	broken.Store(true)
	fragile := activities.New("fragile", func(ctx context.Context, x int) (int, error) {
		if broken.Load() {
			return 0, policy.Permanent(errors.New("the remote system is down"))
		}
		return x * 2, nil
	})
	kid := sdk.NewWorkflow("fragile-child", func(ctx context.Context, x int) (int, error) {
		return sdk.Execute(ctx, fragile, x)
	})
	parent := sdk.NewWorkflow("fragile-parent", func(ctx context.Context, x int) (int, error) {
		return sdk.Call(ctx, kid, x)
	})
	e.worker(e.config(), parent, kid)
	r, _ := sdk.Start(e.ctx, e.client, parent, 21)
	_, err := result(t, r)
	var re *sdk.RunError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "non_retryable") {
		t.Fatalf("parent: %v, want it failed with its child's failure", err)
	}
	child := q[uuid.UUID](e, `SELECT id FROM {schema}.runs WHERE parent_run_id = $1`, r.ID)
	broken.Store(false)
	if err := e.op.Requeue(e.ctx, child, "remote system fixed"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the child to complete", func() bool { return e.runStatus(child) == "completed" })
	if err := e.op.Requeue(e.ctx, r.ID, "child fixed"); err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, r); err != nil || out != 42 {
		t.Fatalf("parent after the requeues: %d, %v", out, err)
	}
}

// Bad signals and primitives are refused before anything is recorded.
func TestPrimitives_RefuseBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, _ := sdk.Start(e.ctx, e.client, echoWorkflow, in{N: 1}, sdk.WithDelay(time.Hour))
	if err := e.client.Send(e.ctx, r.ID, "", 1); err == nil {
		t.Fatal("Send with an empty name: no error")
	}
	if err := e.client.Send(e.ctx, r.ID, "big", strings.Repeat("x", sdk.DefaultMaxPayload)); !errors.Is(err, sdk.ErrPayloadTooLarge) {
		t.Fatalf("Send of a payload over the limit: %v, want ErrPayloadTooLarge", err)
	}
	if err := e.client.Send(e.ctx, r.ID, "ch", make(chan int)); err == nil {
		t.Fatal("Send of a payload that does not encode: no error")
	}
	// Names are index keys: over sdk.MaxNameLength bytes, a clear error,
	// in Go and in SQL (where a 1 MB name failed with an index error).
	long := strings.Repeat("n", sdk.MaxNameLength+1)
	if err := e.client.Send(e.ctx, r.ID, long, 1); err == nil || !strings.Contains(err.Error(), "over the limit of 200") {
		t.Fatalf("Send with a name of %d bytes: %v, want the limit named", len(long), err)
	}
	if _, err := sdk.GetEvent[int](e.ctx, e.client, r.ID, long, 0); err == nil || !strings.Contains(err.Error(), "over the limit of 200") {
		t.Fatalf("GetEvent with a key of %d bytes: %v, want the limit named", len(long), err)
	}
	var pgErr *pgconn.PgError
	if _, err := e.pool.Exec(e.ctx, fmt.Sprintf(`SELECT %s.send_signal($1, $2)`, e.schema), r.ID, strings.Repeat("n", 1<<20)); !errors.As(err, &pgErr) ||
		pgErr.Code != "22023" || !strings.Contains(pgErr.Message, "over the limit of 200") {
		t.Fatalf("send_signal with a 1 MB name: %v, want 22023 naming the limit", err)
	}
	if err := e.client.Send(e.ctx, r.ID, strings.Repeat("n", sdk.MaxNameLength), 1); err != nil {
		t.Fatalf("Send with a name of the limit's length: %v", err)
	}
	if n := q[int](e, `SELECT count(*) FROM {schema}.signals`); n != 1 {
		t.Fatalf("%d signals recorded, want the one within the limit", n)
	}
	if _, err := sdk.Receive[int](e.ctx, "x", 0); !errors.Is(err, sdk.ErrNotInWorkflow) {
		t.Fatalf("Receive outside a workflow: %v", err)
	}
	if err := sdk.Sleep(e.ctx, time.Second); !errors.Is(err, sdk.ErrNotInWorkflow) {
		t.Fatalf("Sleep outside a workflow: %v", err)
	}
	bad := sdk.NewWorkflow("bad-calls", func(ctx context.Context, _ int) (string, error) {
		var errs []string
		if _, err := sdk.Receive[int](ctx, "", 0); err != nil {
			errs = append(errs, "empty name")
		}
		if _, err := sdk.Receive[int](ctx, "x", -time.Second); err != nil {
			errs = append(errs, "negative timeout")
		}
		if _, err := sdk.Receive[int](ctx, strings.Repeat("n", sdk.MaxNameLength+1), 0); err != nil {
			errs = append(errs, "long name")
		}
		if err := sdk.SetEvent(ctx, strings.Repeat("k", sdk.MaxNameLength+1), 1); err != nil {
			errs = append(errs, "long key")
		}
		if err := sdk.SetEvent(ctx, "", 1); err != nil {
			errs = append(errs, "empty key")
		}
		if _, err := sdk.StartChild(ctx, shipOne, shipment{}, sdk.WithKey("k")); err != nil {
			errs = append(errs, "child key")
		}
		if _, err := sdk.StartChild(ctx, shipOne, shipment{}, sdk.WithFairnessKey("tenant")); err != nil {
			errs = append(errs, "child fairness")
		}
		return strings.Join(errs, ","), nil
	})
	e.worker(e.config(), bad)
	br, _ := sdk.Start(e.ctx, e.client, bad, 0)
	if out, err := result(t, br); err != nil || out != "empty name,negative timeout,long name,long key,empty key,child key,child fairness" {
		t.Fatalf("result %q, %v", out, err)
	}
	if n := q[int](e, `SELECT count(*) FROM {schema}.steps WHERE run_id = $1`, br.ID); n != 0 {
		t.Fatalf("%d steps recorded by refused calls", n)
	}
}

// A short sleep interrupted by a graceful shutdown is handed over recorded,
// with its due time: the next worker keeps it rather than sleeping again.
func TestSleep_ShortSleepHandedOverAtShutdownKeepsItsDueTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proceed := make(chan struct{})
	started := make(chan struct{}, 1)
	gate := activities.New("gate", func(ctx context.Context, x int) (int, error) {
		if info, _ := activities.InfoFrom(ctx); info.Attempt == 1 {
			started <- struct{}{}
			<-proceed
		}
		return x, nil
	})
	wf := sdk.NewWorkflow("nap-at-shutdown", func(ctx context.Context, x int) (int, error) {
		if _, err := sdk.Execute(ctx, gate, x); err != nil {
			return 0, err
		}
		if err := sdk.Sleep(ctx, 90*time.Millisecond); err != nil {
			return 0, err
		}
		return sdk.Execute(ctx, count, x)
	})
	a := e.worker(e.config(), wf)
	r, _ := sdk.Start(e.ctx, e.client, wf, 1)
	<-started
	done := make(chan struct{})
	go func() {
		defer close(done)
		stop(t, a, 10*time.Second) // drains: the attempt finishes, then the sleep is handed over
	}()
	time.Sleep(100 * time.Millisecond) // Shutdown has stopped claiming and waits for the attempt
	close(proceed)
	<-done
	if got := e.timeline(r.ID); !slices.Equal(got, []string{"1 activity gate completed", "2 sleep sleep waiting"}) {
		t.Fatalf("timeline after the hand-over %v", got)
	}
	due := q[time.Time](e, `SELECT due_at FROM {schema}.steps WHERE run_id = $1 AND step = 2`, r.ID)
	if w := q[string](e, `SELECT coalesce(waiting_for, '') FROM {schema}.runs WHERE id = $1`, r.ID); w != "sleep" {
		t.Fatalf("run waits for %q, want the sleep", w)
	}
	e.worker(e.config(), wf)
	if out, err := result(t, r); err != nil || out != 2 {
		t.Fatalf("result %d, %v", out, err)
	}
	if again := q[time.Time](e, `SELECT due_at FROM {schema}.steps WHERE run_id = $1 AND step = 2`, r.ID); !again.Equal(due) {
		t.Fatalf("due time moved from %s to %s", due, again)
	}
	if woke := q[time.Time](e, `SELECT woke_at FROM {schema}.step_timeline WHERE run_id = $1 AND step = 2`, r.ID); woke.Before(due) {
		t.Fatalf("woke at %s, before its due time %s", woke, due)
	}
}

// A receive's timeout shorter than the poll interval fires on time: the
// worker that suspended the run wakes its claim loop at the due time
// instead of leaving it to the next poll.
func TestSignal_AShortTimeoutFiresOnTimeNotAtTheNextPoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := sdk.NewWorkflow("impatient", func(ctx context.Context, _ int) (string, error) {
		_, err := sdk.Receive[int](ctx, "answer", 300*time.Millisecond)
		if errors.Is(err, sdk.ErrTimeout) {
			return "timed out", nil
		}
		return "answered", err
	})
	cfg := e.config()
	cfg.PollInterval = 3 * time.Second
	e.worker(cfg, wf)
	began := time.Now()
	r, _ := sdk.Start(e.ctx, e.client, wf, 0)
	out, err := result(t, r)
	if err != nil || out != "timed out" {
		t.Fatalf("result %q, %v", out, err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("a 300 ms timeout took %s with a 3 s poll interval", took)
	}
}

// The policy for a parent that fails or completes while its child runs:
// the child is left running (only a cancelled parent cancels its children).
func TestChild_AParentThatFailsLeavesItsChildRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	waiter := sdk.NewWorkflow("waits-for-go", func(ctx context.Context, _ int) (int, error) {
		return sdk.Receive[int](ctx, "go", 0)
	})
	parent := sdk.NewWorkflow("starts-and-fails", func(ctx context.Context, _ int) (string, error) {
		if _, err := sdk.StartChild(ctx, waiter, 0); err != nil {
			return "", err
		}
		return "", errors.New("the parent gives up")
	})
	e.worker(e.config(), parent, waiter)
	r, _ := sdk.Start(e.ctx, e.client, parent, 0)
	if _, err := result(t, r); err == nil {
		t.Fatal("the parent did not fail")
	}
	kid := q[uuid.UUID](e, `SELECT id FROM {schema}.runs WHERE parent_run_id = $1`, r.ID)
	eventually(t, "the child to wait for its signal", func() bool {
		return q[string](e, `SELECT coalesce(waiting_for, '') FROM {schema}.runs WHERE id = $1`, kid) == "signal:go"
	})
	if st := e.runStatus(kid); st != "queued" {
		t.Fatalf("child is %s after its parent failed, want it left waiting", st)
	}
	if err := e.client.Send(e.ctx, kid, "go", 5); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the child to complete", func() bool { return e.runStatus(kid) == "completed" })
}

// A cancel whose notice the worker missed (sent while its LISTEN connection
// was down, or before it first took effect) reaches the run as soon as the
// LISTEN is back: the worker reads its runs' cancels again after every
// LISTEN, and does not leave them for its next heartbeat (20 s away here).
func TestCancel_ANoticeMissedWhileNotListeningArrivesWhenTheListenIsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proxy, listenURL, err := faultproxy.StartFor(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	lcfg, err := pgx.ParseConfig(listenURL)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	waits := activities.New("waits-for-cancel", func(ctx context.Context, x int) (int, error) {
		started <- struct{}{}
		<-ctx.Done()
		return 0, context.Cause(ctx)
	})
	wf := sdk.NewWorkflow("missed-cancel", func(ctx context.Context, x int) (int, error) {
		return sdk.Execute(ctx, waits, x)
	})
	cfg := e.config()
	cfg.LeaseTTL, cfg.HeartbeatInterval = time.Minute, 20*time.Second
	cfg.ListenConfig = lcfg
	w := e.worker(cfg, wf)
	r, _ := sdk.Start(e.ctx, e.client, wf, 1)
	<-started
	proxy.Blackhole() // the LISTEN connection hears nothing from now on
	proxy.CutAll()
	if err := e.client.Cancel(e.ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	// The notice is gone, and so is its wake: applied (at a worker's poll)
	// with a second notice that is lost too.
	eventually(t, "the cancel applied to the run", func() bool {
		return q[bool](e, `SELECT cancel_requested_at IS NOT NULL FROM {schema}.runs WHERE id = $1`, r.ID) &&
			q[int](e, `SELECT count(*) FROM {schema}.wakes`) == 0
	})
	resumed := time.Now()
	proxy.Resume()
	if _, err := result(t, r); !errors.Is(err, sdk.ErrCancelled) {
		t.Fatalf("result %v, want ErrCancelled", err)
	}
	took := time.Since(resumed)
	t.Logf("cancel reached the run %s after the LISTEN connection was back", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Fatalf("the missed cancel reached the run %s after the LISTEN was back: not by its re-read (the next heartbeat is 20 s away)", took)
	}
	eventually(t, "the run's end counted", func() bool { return w.Stats().Cancelled == 1 })
	if st := w.Stats(); st.LeasesLost != 0 {
		t.Fatalf("stats %+v", st)
	}
}
