package runtime_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// A worker is in the registry from its start, with what it serves and holds,
// kept by its heartbeat, and marked stopped by its Shutdown. Runs of a
// workflow no live worker serves are orphans until one starts.
func TestRegistry_WorkersAndOrphans(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hold := make(chan struct{})
	started := make(chan struct{}, 1)
	slow := activities.New("slow", func(ctx context.Context, x int) (int, error) {
		started <- struct{}{}
		<-hold
		return x, nil
	})
	wf := sdk.NewWorkflow("registered", func(ctx context.Context, x int) (int, error) { return sdk.Execute(ctx, slow, x) })
	other := sdk.NewWorkflow("nobody-serves", func(ctx context.Context, x int) (int, error) { return x, nil })

	if _, err := sdk.Start(e.ctx, e.client, other, 1); err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.HeartbeatInterval = 100 * time.Millisecond
	w := e.worker(cfg, wf)
	r, _ := sdk.Start(e.ctx, e.client, wf, 1)
	<-started
	var me record.Worker
	eventually(t, "the heartbeat to report the held run", func() bool {
		ws, err := e.op.Workers(e.ctx, false)
		if err != nil || len(ws) != 1 {
			return false
		}
		me = ws[0]
		return me.RunsHeld == 1
	})
	if me.Label != w.Label() || !me.Live || !slices.Equal(me.Workflows, []string{"registered"}) ||
		!slices.Equal(me.Queues, []string{"default"}) || me.Concurrency != cfg.Concurrency || me.Version != sdk.Version || me.PID == 0 {
		t.Fatalf("registry row %+v", me)
	}
	orphans, err := e.op.Orphans(e.ctx)
	if err != nil || len(orphans) != 1 || orphans[0].Workflow != "nobody-serves" || orphans[0].Runs != 1 {
		t.Fatalf("orphans %+v, %v; want the one run of the unserved workflow", orphans, err)
	}
	close(hold)
	if _, err := result(t, r); err != nil {
		t.Fatal(err)
	}
	stop(t, w, 5*time.Second)
	ws, err := e.op.Workers(e.ctx, true)
	if err != nil || len(ws) != 1 || ws[0].Live || ws[0].StoppedAt == nil {
		t.Fatalf("after Shutdown: %+v, %v; want it stopped", ws, err)
	}
	if live, _ := e.op.Workers(e.ctx, false); len(live) != 0 {
		t.Fatalf("live workers after Shutdown: %+v", live)
	}
	// With no live worker, every queued run is an orphan.
	if _, err := sdk.Start(e.ctx, e.client, wf, 2); err != nil {
		t.Fatal(err)
	}
	orphans, _ = e.op.Orphans(e.ctx)
	if len(orphans) != 2 {
		t.Fatalf("orphans %+v, want both workflows", orphans)
	}
}

// A worker whose registry row cannot be written (here a constraint refuses
// it; in production, a role without the grant) keeps renewing its leases:
// the registry is for people, never in the way of a lease.
func TestRegistry_AWorkerThatCannotWriteItsRowKeepsItsLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slow := activities.New("slow", func(ctx context.Context, x int) (int, error) {
		select {
		case <-time.After(3 * time.Second): // longer than the lease
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
		return x, nil
	})
	wf := sdk.NewWorkflow("outlives-its-lease", func(ctx context.Context, x int) (int, error) { return sdk.Execute(ctx, slow, x) })
	cfg := e.config()
	cfg.LeaseTTL, cfg.HeartbeatInterval = 2*time.Second, 200*time.Millisecond
	w := e.worker(cfg, wf)
	if _, err := e.pool.Exec(e.ctx, "ALTER TABLE "+e.schema+".workers ADD CONSTRAINT refused CHECK (false) NOT VALID"); err != nil {
		t.Fatal(err)
	}
	r, _ := sdk.Start(e.ctx, e.client, wf, 1)
	if out, err := result(t, r); err != nil || out != 1 {
		t.Fatalf("result %d, %v", out, err)
	}
	if st := w.Stats(); st.LeasesLost != 0 {
		t.Fatalf("stats %+v: the registry's failure cost a lease", st)
	}
}
