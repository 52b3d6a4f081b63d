package runtime_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// replicatedPool is a pool on rep's multi-host URL (primary then standby,
// target_session_attrs=read-write), with Tenure's schema migrated.
func replicatedPool(t *testing.T, rep *pgtest.Replicated) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(rep.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// A failover to a synchronous standby in the middle of a workload loses
// nothing and runs nothing twice: the worker and the client, on a
// multi-host connection string, follow the promotion, whether the primary
// crashes or is made read-only for a switchover. Every Start that returned
// is a run that completes, every step ran exactly once (at-most-once and
// at-least-once alike), no lease changed hands and no attempt is left
// running.
func TestFailover_ToASynchronousStandbyLosesNothingAndRunsNothingTwice(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"crash", "switchover"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			rep := pgtest.Replicate(t, true)
			pool := replicatedPool(t, rep)
			var invoked sync.Map // idempotency key -> *atomic.Int32
			count := func(ctx context.Context) {
				n, _ := invoked.LoadOrStore(activities.IdempotencyKey(ctx), new(atomic.Int32))
				n.(*atomic.Int32).Add(1)
				time.Sleep(20 * time.Millisecond)
			}
			charge := activities.New("charge", func(ctx context.Context, n int) (int, error) {
				count(ctx)
				return n, nil
			}, policy.AtMostOnce())
			ship := activities.New("ship", func(ctx context.Context, n int) (int, error) {
				count(ctx)
				return n, nil
			})
			wf := sdk.NewWorkflow("order", func(ctx context.Context, n int) (int, error) {
				if _, err := sdk.Execute(ctx, charge, n); err != nil {
					return 0, err
				}
				return sdk.Execute(ctx, ship, n)
			})
			client, err := sdk.NewClient(pool, sdk.WithPollInterval(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			w, err := runtime.NewWorker(pool, runtime.Config{
				Concurrency: 16, LeaseTTL: 10 * time.Second, HeartbeatInterval: time.Second,
				PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Register(wf); err != nil {
				t.Fatal(err)
			}
			if err := w.Start(context.WithoutCancel(t.Context())); err != nil {
				t.Fatal(err)
			}
			defer stop(t, w, 10*time.Second)

			// Callers start runs before, during and after the failover;
			// those whose Start returned are acknowledged.
			var mu sync.Mutex
			var acked []*sdk.Run[int]
			var refused atomic.Int32
			starting := make(chan struct{})
			var callers sync.WaitGroup
			for c := range 4 {
				callers.Go(func() {
					for i := range 15 {
						if i == 5 && c == 0 {
							close(starting)
						}
						ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
						r, err := sdk.Start(ctx, client, wf, c*100+i)
						cancel()
						if err != nil {
							refused.Add(1)
						} else {
							mu.Lock()
							acked = append(acked, r)
							mu.Unlock()
						}
						time.Sleep(60 * time.Millisecond)
					}
				})
			}
			<-starting
			switch how {
			case "crash":
				if err := rep.StopPrimary("immediate"); err != nil {
					t.Fatal(err)
				}
			case "switchover":
				old, err := pgx.Connect(t.Context(), rep.PrimaryURL())
				if err != nil {
					t.Fatal(err)
				}
				for _, q := range []string{`ALTER SYSTEM SET default_transaction_read_only = on`, `SELECT pg_reload_conf()`} {
					if _, err := old.Exec(t.Context(), q); err != nil {
						t.Fatal(err)
					}
				}
				_ = old.Close(context.Background())
			}
			if err := rep.Promote(); err != nil {
				t.Fatal(err)
			}
			callers.Wait()

			for _, r := range acked {
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				out, err := r.Result(ctx)
				cancel()
				if err != nil {
					var st, oldSt string
					_ = pool.QueryRow(t.Context(), `SELECT status || ' ' || epoch || ' ' || coalesce(claimant, '') || ' ' || coalesce(lease_expires_at::text, '') || ' ' || pg_is_in_recovery() FROM tenure.runs WHERE id = $1`, r.ID).Scan(&st)
					if old, err := pgx.Connect(t.Context(), rep.PrimaryURL()); err == nil {
						_ = old.QueryRow(t.Context(), `SELECT status || ' ' || epoch FROM tenure.runs WHERE id = $1`, r.ID).Scan(&oldSt)
						_ = old.Close(context.Background())
					}
					t.Fatalf("run %s, started before its Start returned, after the failover: %d, %v (new primary: %s; old: %s; stats %+v)",
						r.ID, out, err, st, oldSt, w.Stats())
				}
			}
			var twice []string
			invoked.Range(func(k, v any) bool {
				if n := v.(*atomic.Int32).Load(); n != 1 {
					twice = append(twice, fmt.Sprintf("%s ×%d", k, n))
				}
				return true
			})
			if len(twice) > 0 {
				t.Fatalf("steps invoked more than once: %s", strings.Join(twice, ", "))
			}
			var running, lost, rows int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE a.status = 'running'), count(*) FILTER (WHERE a.status = 'lost'), count(*)
				FROM tenure.attempts a`).Scan(&running, &lost, &rows); err != nil {
				t.Fatal(err)
			}
			if running != 0 || lost != 0 || rows != 2*len(acked)+2*countUnacked(t, pool, len(acked)) {
				t.Fatalf("%d attempts running and %d lost of %d after the failover; want every one ended, none lost", running, lost, rows)
			}
			if st := w.Stats(); st.LeasesLost != 0 {
				t.Fatalf("stats %+v: want no lease lost", st)
			}
			t.Logf("%d runs acknowledged and completed, %d Starts refused during the failover; worker stats %+v",
				len(acked), refused.Load(), w.Stats())
		})
	}
}

// countUnacked is how many runs exist beyond the acknowledged ones (a Start
// that failed for its caller after its commit), each of which must have
// completed too.
func countUnacked(t *testing.T, pool *pgxpool.Pool, acked int) int {
	t.Helper()
	var all, completed int
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE status = 'completed') FROM tenure.runs`).
			Scan(&all, &completed); err != nil {
			t.Fatal(err)
		}
		if all == completed || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if all != completed {
		t.Fatalf("%d of %d runs completed", completed, all)
	}
	return all - acked
}

// A worker whose database server has standbys it does not wait for at
// commit says so once in its log, in Replication, to its observer (otel's
// metric), and, when told to require synchronous replication, in Health;
// with a synchronous standby it says nothing.
func TestReplication_AWorkerReportsCommitsNotSynchronouslyReplicated(t *testing.T) {
	t.Parallel()
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			t.Parallel()
			rep := pgtest.Replicate(t, sync)
			pool := replicatedPool(t, rep)
			var logs logBuffer
			obs := &replicationSeen{}
			noop := activities.New("noop", func(ctx context.Context, n int) (int, error) { return n, nil })
			wf := sdk.NewWorkflow("replicated", func(ctx context.Context, n int) (int, error) { return sdk.Execute(ctx, noop, n) })
			w, err := runtime.NewWorker(pool, runtime.Config{
				LeaseTTL: 2 * time.Second, HeartbeatInterval: 100 * time.Millisecond, Observer: obs,
				RequireSynchronousReplication: true,
				Logger:                        logs.logger(),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Register(wf); err != nil {
				t.Fatal(err)
			}
			if err := w.Start(context.WithoutCancel(t.Context())); err != nil {
				t.Fatal(err)
			}
			defer stop(t, w, 5*time.Second)
			r := w.Replication()
			warnings := strings.Count(logs.String(), "commits are not synchronously replicated")
			if !sync {
				if r.Mode != record.ReplicationAsynchronous || r.Standbys != 1 || warnings != 1 {
					t.Fatalf("replication %+v, %d warnings in the log; want asynchronous with 1 standby, said once\n%s", r, warnings, logs.String())
				}
				if err := w.Health(); err == nil || !strings.Contains(err.Error(), "not synchronously replicated") ||
					!strings.Contains(err.Error(), "(Config.RequireSynchronousReplication)") {
					t.Fatalf("Health %v, want the asynchronous standby reported", err)
				}
				if got := obs.last(); got.Mode != record.ReplicationAsynchronous {
					t.Fatalf("the observer heard %+v", got)
				}
				return
			}
			if r.Mode != record.ReplicationSynchronous || warnings != 0 {
				t.Fatalf("replication %+v, %d warnings; want synchronous, nothing said", r, warnings)
			}
			if err := w.Health(); err != nil {
				t.Fatalf("Health with a synchronous standby: %v", err)
			}
		})
	}
}

// replicationSeen is an Observer that keeps what it heard of replication.
type replicationSeen struct {
	outcomes
	mu sync.Mutex
	r  record.Replication
}

func (o *replicationSeen) ReplicationChecked(r record.Replication) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.r = r
}

func (o *replicationSeen) last() record.Replication {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.r
}
