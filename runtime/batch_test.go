package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
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
