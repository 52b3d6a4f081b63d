package riveradapter_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/riveradapter"
	"github.com/tenurehq/tenure/tenuretest"
)

func TestMain(m *testing.M) {
	if arg := os.Getenv(childEnv); arg != "" {
		workerProcess(arg) // the kill test's worker process: never returns
	}
	os.Exit(tenuretest.Main(m))
}

// FlakyArgs is a job that fails its first Fail attempts with Err.
type FlakyArgs struct {
	Fail int    `json:"fail"`
	Err  string `json:"err"` // "plain", "permanent", "retry-after" or "panic"
}

func (FlakyArgs) Kind() string { return "flaky" }

type flakyWorker struct {
	river.WorkerDefaults[FlakyArgs]
	calls atomic.Int32
}

func (w *flakyWorker) Work(ctx context.Context, job *river.Job[FlakyArgs]) error {
	n := w.calls.Add(1)
	if int(n) > job.Args.Fail {
		return nil
	}
	switch job.Args.Err {
	case "panic":
		panic("nil map in the job")
	case "permanent":
		return policy.Permanent(errors.New("card declined"))
	case "retry-after":
		return policy.WithRetryAfter(errors.New("429 too many requests"), 300*time.Millisecond)
	}
	return errors.New("connection reset")
}

// client is a River client on a schema of its own with River's tables,
// the adapter installed with kind flaky's policy p.
func client(t *testing.T, p policy.Retry, w *flakyWorker) (*river.Client[pgx5Tx], *pgxpool.Pool) {
	t.Helper()
	env := tenuretest.New(t)
	migrateRiver(t, env)
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	cfg := &river.Config{
		Schema:            env.Schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Workers:           workers,
		Logger:            slog.New(slog.DiscardHandler),
		FetchPollInterval: 100 * time.Millisecond,
	}
	r, err := riveradapter.NewRetry(riveradapter.Kind("flaky", p))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	return startClient(t, env, cfg), env.Pool
}

// migrateRiver adds River's tables to env's schema.
func migrateRiver(t *testing.T, env *tenuretest.Env) {
	t.Helper()
	migrator, err := rivermigrate.New(riverpgxv5.New(env.Pool), &rivermigrate.Config{Schema: env.Schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Migrate(t.Context(), rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
}

// startClient makes and starts a River client of cfg on env's pool,
// stopped at cleanup.
func startClient(t *testing.T, env *tenuretest.Env, cfg *river.Config) *river.Client[pgx5Tx] {
	t.Helper()
	c, err := river.NewClient(riverpgxv5.New(env.Pool), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return c
}

type pgx5Tx = pgx.Tx

// final waits for the job to reach a final state (or to be scheduled again
// when want is scheduled) and returns its row.
func final(t *testing.T, c *river.Client[pgx5Tx], id int64, want rivertype.JobState) *rivertype.JobRow {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := c.JobGet(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == want {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: %s after 30 s, want %s (errors %d)", id, j.State, want, len(j.Errors))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustPolicy(t *testing.T, opts ...policy.Option) policy.Retry {
	t.Helper()
	p, err := policy.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A job failing with plain errors is retried at the policy's delays and,
// once MaxAttempts are spent, cancelled with retries_exhausted, though
// River's own MaxAttempts (25) would have retried it more.
func TestRetry_MaxAttemptsSpentCancelsTheJobAtThePolicysDelays(t *testing.T) {
	t.Parallel()
	w := &flakyWorker{}
	c, _ := client(t, mustPolicy(t, policy.MaxAttempts(3), policy.Constant(200*time.Millisecond), policy.Jitter(policy.NoJitter)), w)
	res, err := c.Insert(t.Context(), FlakyArgs{Fail: 100, Err: "plain"}, &river.InsertOpts{MaxAttempts: 25})
	if err != nil {
		t.Fatal(err)
	}
	j := final(t, c, res.Job.ID, rivertype.JobStateCancelled)
	if w.calls.Load() != 3 || len(j.Errors) != 3 || j.Attempt != 3 {
		t.Fatalf("%d calls, %d errors, attempt %d; want 3 of each", w.calls.Load(), len(j.Errors), j.Attempt)
	}
	if last := j.Errors[2].Error; !strings.Contains(last, "retries_exhausted") || !strings.Contains(last, "connection reset") {
		t.Errorf("last error %q, want the reason and the job's error", last)
	}
	// The policy's delay, not River's (attempt^4 seconds: 1 s, then 16 s).
	for i := 1; i < 3; i++ {
		gap := j.Errors[i].At.Sub(j.Errors[i-1].At)
		if gap < 200*time.Millisecond || gap > 2*time.Second {
			t.Errorf("attempt %d came %s after attempt %d; want the policy's 200 ms (and no more than River's fetch poll after)", i+1, gap, i)
		}
	}
}

// A permanent error cancels the job at its first attempt.
func TestRetry_APermanentErrorCancelsAtOnce(t *testing.T) {
	t.Parallel()
	w := &flakyWorker{}
	c, _ := client(t, mustPolicy(t, policy.MaxAttempts(5), policy.Constant(50*time.Millisecond)), w)
	res, err := c.Insert(t.Context(), FlakyArgs{Fail: 100, Err: "permanent"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j := final(t, c, res.Job.ID, rivertype.JobStateCancelled)
	if w.calls.Load() != 1 || !strings.Contains(j.Errors[0].Error, "non_retryable") {
		t.Fatalf("%d calls, errors %v; want 1, non_retryable", w.calls.Load(), j.Errors)
	}
}

// A Retry-After hint snoozes the job for the hint: River does not count
// the attempt, so a job told to wait twice completes at attempt 1 of a
// policy of one attempt.
func TestRetry_ARetryAfterHintSnoozesUncounted(t *testing.T) {
	t.Parallel()
	w := &flakyWorker{}
	c, _ := client(t, mustPolicy(t, policy.MaxAttempts(1)), w)
	start := time.Now()
	res, err := c.Insert(t.Context(), FlakyArgs{Fail: 2, Err: "retry-after"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j := final(t, c, res.Job.ID, rivertype.JobStateCompleted)
	if w.calls.Load() != 3 || j.Attempt != 1 || len(j.Errors) != 0 {
		t.Fatalf("%d calls, attempt %d, %d errors; want 3 calls, attempt 1, no error", w.calls.Load(), j.Attempt, len(j.Errors))
	}
	if took := time.Since(start); took < 600*time.Millisecond {
		t.Errorf("completed %s after its insert, before two hints of 300 ms", took)
	}
}

// Bad options are refused with what to do.
func TestNewRetry_RefusesBadOptions(t *testing.T) {
	t.Parallel()
	ok := mustPolicy(t)
	for _, c := range []struct {
		opts []riveradapter.Option
		want string
	}{
		{nil, "no job kind has a policy"},
		{[]riveradapter.Option{riveradapter.Kind("", ok)}, "empty job kind"},
		{[]riveradapter.Option{riveradapter.Kind("a", ok), riveradapter.Kind("a", ok)}, `"a" given twice`},
		{[]riveradapter.Option{riveradapter.Kind("a", policy.Retry{})}, `Kind "a"`},
		{[]riveradapter.Option{riveradapter.Kind("a", ok), riveradapter.Fallback(nil)}, "nil retry policy"},
	} {
		if _, err := riveradapter.NewRetry(c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewRetry: %v, want an error with %q", err, c.want)
		}
	}
	r, err := riveradapter.NewRetry(riveradapter.Kind("a", ok))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &river.Config{}
	if err := r.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	if err := r.Configure(cfg); err == nil {
		t.Error("a second Configure of the same configuration: no error")
	}
}

// A panic is an error to the policy: a job that panics twice under a policy
// of two attempts is cancelled after two calls, its errors carrying the
// panic's value and stack.
func TestRetry_APanicIsDecidedByThePolicy(t *testing.T) {
	t.Parallel()
	w := &flakyWorker{}
	c, _ := client(t, mustPolicy(t, policy.MaxAttempts(2), policy.Constant(100*time.Millisecond), policy.Jitter(policy.NoJitter)), w)
	res, err := c.Insert(t.Context(), FlakyArgs{Fail: 100, Err: "panic"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j := final(t, c, res.Job.ID, rivertype.JobStateCancelled)
	if w.calls.Load() != 2 || len(j.Errors) != 2 {
		t.Fatalf("%d calls, %d errors; want 2 of each", w.calls.Load(), len(j.Errors))
	}
	if e := j.Errors[1].Error; !strings.Contains(e, "retries_exhausted") || !strings.Contains(e, "panic: nil map in the job") || !strings.Contains(e, "retry_test.go") {
		t.Errorf("last error %q: want the reason, the panic's value and its stack", e)
	}
}
