package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// compiled collects what auto_explain says of the statements a server
// JIT-compiled, from the notices of every connection opened with it.
type compiled struct {
	mu        sync.Mutex
	explained int
	jit       []string // the notices of compiled statements
}

func (c *compiled) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	if !strings.HasPrefix(n.Message, "duration:") { // auto_explain's
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.explained++
	if strings.Contains(n.Message, "\nJIT:") {
		c.jit = append(c.jit, n.Message)
	}
}

func (c *compiled) take() (explained int, jit []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	explained, jit = c.explained, c.jit
	c.explained, c.jit = 0, nil
	return explained, jit
}

// compilingPool is a pool on a server that JIT-compiles every statement
// (jit_above_cost and the others at 0), each of its connections telling of
// every statement it ran through auto_explain's notices: a worker's own
// connections (heartbeat, LISTEN), opened with the pool's settings, too.
func compilingPool(t *testing.T) (*pgxpool.Pool, *compiled) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"jit": "on", "jit_above_cost": "0", "jit_inline_above_cost": "0", "jit_optimize_above_cost": "0",
		"session_preload_libraries":     "auto_explain",
		"auto_explain.log_min_duration": "0",
		"auto_explain.log_level":        "notice",
		"client_min_messages":           "notice",
	} {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	c := &compiled{}
	cfg.ConnConfig.OnNotice = c.notice
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// The check can fail: a statement of ours is compiled there.
	if _, err := pool.Exec(t.Context(), "SELECT 1"); err != nil {
		t.Fatalf("a server that compiles everything, with auto_explain (needs a superuser): %v", err)
	}
	if n, jit := c.take(); n != 1 || len(jit) != 1 {
		t.Fatalf("SELECT 1 at jit_above_cost = 0: %d statements explained, %d compiled; want it told of and compiled", n, len(jit))
	}
	return pool, c
}

// No statement that a worker or a client sends is ever JIT-compiled,
// whatever the server's settings: on a server that compiles every
// statement, a workload through every hot path (Start, StartMany, StartTx,
// Result, claims, commits, heartbeats, retries, a rescue, durable sleeps,
// signals sent in and out of a transaction, events, children, a transactional
// activity, a failure and a cancel) has none compiled but the schema check,
// once per process. Before migration 9 every one of them was.
func TestHotPath_NoStatementIsJITCompiled(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // migrated on a pool of its own
	pool, seen := compilingPool(t)
	client, err := sdk.NewClient(pool, sdk.WithSchema(e.schema), sdk.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	var tries sync.Map
	flaky := activities.New("flaky", func(ctx context.Context, n int) (int, error) {
		if _, again := tries.LoadOrStore(activities.IdempotencyKey(ctx), true); !again {
			return 0, errors.New("first try fails")
		}
		return n, nil
	}, policy.Constant(10*time.Millisecond))
	slow := activities.New("slow", func(ctx context.Context, n int) (int, error) {
		time.Sleep(300 * time.Millisecond) // heartbeats beat meanwhile
		return n, nil
	})
	inTx := activities.NewTx("in-tx", func(ctx context.Context, tx pgx.Tx, n int) (int, error) {
		var one int // the application's own statement: compiled, as the server says
		return n, tx.QueryRow(ctx, "SELECT 1 AS application").Scan(&one)
	})
	fails := activities.New("fails", func(ctx context.Context, n int) (int, error) {
		return 0, policy.Permanent(errors.New("no"))
	})
	child := sdk.NewWorkflow("jit-child", func(ctx context.Context, n int) (int, error) {
		return sdk.Execute(ctx, flaky, n)
	})
	wf := sdk.NewWorkflow("jit-all", func(ctx context.Context, n int) (int, error) {
		if _, err := sdk.Execute(ctx, flaky, n); err != nil {
			return 0, err
		}
		if _, err := sdk.Execute(ctx, slow, n); err != nil {
			return 0, err
		}
		if _, err := sdk.Execute(ctx, inTx, n); err != nil {
			return 0, err
		}
		if err := sdk.Sleep(ctx, 100*time.Millisecond); err != nil { // durable: past MaxInProcessSleep
			return 0, err
		}
		if _, err := sdk.Now(ctx); err != nil {
			return 0, err
		}
		if err := sdk.SetEvent(ctx, "half", n); err != nil {
			return 0, err
		}
		got, err := sdk.Receive[int](ctx, "go", time.Minute)
		if err != nil {
			return 0, err
		}
		return sdk.Call(ctx, child, got)
	})
	failing := sdk.NewWorkflow("jit-fails", func(ctx context.Context, n int) (int, error) {
		return sdk.Execute(ctx, fails, n)
	})
	waiting := sdk.NewWorkflow("jit-waits", func(ctx context.Context, n int) (int, error) {
		return sdk.Receive[int](ctx, "never", 0)
	})
	rescued := sdk.NewWorkflow("jit-rescued", func(ctx context.Context, n int) (int, error) {
		return sdk.Execute(ctx, slow, n)
	})

	cfg := e.config()
	cfg.HeartbeatInterval = 50 * time.Millisecond
	cfg.MaxInProcessSleep = 10 * time.Millisecond
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(wf, child, failing, waiting, rescued); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.WithoutCancel(e.ctx)); err != nil {
		t.Fatal(err)
	}
	defer stop(t, w, 10*time.Second)

	ctx := e.ctx
	one, err := sdk.Start(ctx, client, wf, 1)
	if err != nil {
		t.Fatal(err)
	}
	many, err := sdk.StartMany(ctx, client, wf, []sdk.StartParams[int]{{Input: 2}, {Input: 3, Options: []sdk.StartOption{sdk.WithKey("jit-3")}}})
	if err != nil {
		t.Fatal(err)
	}
	var inTxRun *sdk.Run[int]
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		inTxRun, err = sdk.StartTx(ctx, client, tx, wf, 4)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	runs := append([]*sdk.Run[int]{one, inTxRun}, many...)
	for i, r := range runs {
		if v, err := sdk.GetEvent[int](ctx, client, r.ID, "half", 20*time.Second); err != nil || v == 0 {
			t.Fatalf("event of run %d: %d, %v", i, v, err)
		}
		if i%2 == 0 {
			err = client.Send(ctx, r.ID, "go", 10)
		} else {
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return client.SendTx(ctx, tx, r.ID, "go", 10) })
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range runs {
		if out, err := result(t, r); err != nil || out != 10 {
			t.Fatalf("run %s: %d, %v", r.ID, out, err)
		}
	}
	f, _ := sdk.Start(ctx, client, failing, 1)
	if _, err := result(t, f); err == nil {
		t.Fatal("the failing run completed")
	}
	wr, _ := sdk.Start(ctx, client, waiting, 1)
	eventually(t, "the run to wait", func() bool {
		return q[string](e, `SELECT coalesce(waiting_for, '') FROM {schema}.runs WHERE id = $1`, wr.ID) != ""
	})
	if err := client.Cancel(ctx, wr.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := result(t, wr); !errors.Is(err, sdk.ErrCancelled) {
		t.Fatalf("cancelled run: %v", err)
	}
	rr, _ := sdk.Start(ctx, client, rescued, 1)
	eventually(t, "the run to start its attempt", func() bool {
		return q[int](e, `SELECT count(*) FROM {schema}.attempts WHERE run_id = $1`, rr.ID) == 1
	})
	e.expireLease(rr.ID) // reclaimed: its attempts marked lost, its steps loaded
	if _, err := result(t, rr); err != nil {
		t.Fatalf("rescued run: %v", err)
	}

	explained, jit := seen.take()
	var bad []string
	for _, n := range jit {
		// The schema check: once per process, before the schema's
		// planner procedure can be counted on.
		if !strings.Contains(n, "SELECT max(version) FROM") && !strings.Contains(n, "SELECT 1 AS application") {
			bad = append(bad, n)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d statements JIT-compiled:\n%s", len(bad), explained, strings.Join(bad, "\n"))
	}
	if explained < 100 {
		t.Fatalf("only %d statements told of: the workload did not run through the compiling pool", explained)
	}
	t.Logf("%d statements, none of Tenure's JIT-compiled but the schema checks (%d compiled in all)", explained, len(jit))
}
