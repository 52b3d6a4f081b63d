package riveradapter_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/riveradapter"
	"github.com/tenurehq/tenure/tenuretest"
)

// childEnv names the environment variable that makes the test binary a
// River worker process (see workerProcess): the database's URL and the
// schema, separated by a space.
const childEnv = "RIVERADAPTER_TEST_WORKER"

// HangArgs is a job whose worker, in the worker process, blocks until the
// process is killed (after snoozing once, if Snooze); in the test's own
// client it completes at once.
type HangArgs struct {
	Snooze bool `json:"snooze,omitempty"`
}

func (HangArgs) Kind() string { return "hang" }

// StrictArgs is HangArgs of a kind whose policy allows no rescue.
type StrictArgs struct{}

func (StrictArgs) Kind() string { return "hang_strict" }

type hangWorker[A river.JobArgs] struct {
	river.WorkerDefaults[A]
	block bool
}

func (w *hangWorker[A]) Work(ctx context.Context, job *river.Job[A]) error {
	if h, ok := any(job.Args).(HangArgs); ok && h.Snooze && w.block && !strings.Contains(string(job.Metadata), `"snoozes"`) {
		return river.JobSnooze(time.Millisecond)
	}
	if w.block {
		fmt.Printf("working %s %d\n", job.Kind, job.ID)
		select {}
	}
	return nil
}

// hangAdapter is the adapter of both processes: kind hang may be rescued
// once, kind hang_strict never.
func hangAdapter(pool *pgxpool.Pool, schema string) (*riveradapter.Retry, error) {
	once, err := policy.New(policy.MaxAttempts(5), policy.MaxRescues(1))
	if err != nil {
		return nil, err
	}
	never, err := policy.New(policy.MaxAttempts(5), policy.MaxRescues(0))
	if err != nil {
		return nil, err
	}
	return riveradapter.NewRetry(riveradapter.Kind("hang", once), riveradapter.Kind("hang_strict", never),
		riveradapter.Record(pool, schema))
}

// hangClient is a River client of both kinds on schema, with the adapter.
func hangClient(pool *pgxpool.Pool, schema string, block bool, rescueAfter time.Duration) (*river.Client[pgx.Tx], *riveradapter.Retry, error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &hangWorker[HangArgs]{block: block})
	river.AddWorker(workers, &hangWorker[StrictArgs]{block: block})
	cfg := &river.Config{
		Schema:               schema,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:              workers,
		Logger:               slog.New(slog.DiscardHandler),
		FetchPollInterval:    100 * time.Millisecond,
		JobTimeout:           time.Second, // the rescuer leaves jobs without a timeout alone
		RescueStuckJobsAfter: rescueAfter,
	}
	r, err := hangAdapter(pool, schema)
	if err != nil {
		return nil, nil, err
	}
	if err := r.Configure(cfg); err != nil {
		return nil, nil, err
	}
	c, err := river.NewClient(riverpgxv5.New(pool), cfg)
	return c, r, err
}

// workerProcess runs a River client whose jobs block until the process is
// killed; it is the test binary started by the kill test.
func workerProcess(arg string) {
	url, schema, _ := strings.Cut(arg, " ")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c, _, err := hangClient(pool, schema, true, 0)
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	select {}
}

// A worker process SIGKILLed in the middle of two jobs: River's rescuer (a
// stuck-job timeout of 1 s, in the client started after the kill) puts them
// back, and the adapter tells the crash from an error: each job's first
// attempt is closed as lost and charged to MaxRescues, not MaxAttempts.
// Kind hang (one rescue allowed) runs again and completes, its second
// attempt marked a rescue; kind hang_strict (none allowed) is cancelled
// before it runs again and is a failure rescues_exhausted; a job River
// allowed one attempt is discarded by the rescuer and recorded by the
// reconciler, rescues_exhausted too; a job that snoozed before it blocked
// (River lowered its attempt to 1 again) had its attempt written before it
// ran, and is rescued as the first. River itself
// counted the lost attempt as one of its attempts (its attempt is 2): what
// River's semantics still do, docs/river.md says. The first attempts were
// not written before their end, so the lost ones are taken from River's
// errors (the rescuer's) when the next attempt begins.
func TestRecord_ASIGKILLedWorkersJobsAreRescuedAndChargedToMaxRescues(t *testing.T) {
	t.Parallel()
	env := tenuretest.New(t)
	migrateRiver(t, env)
	inserter, err := river.NewClient(riverpgxv5.New(env.Pool), &river.Config{Schema: env.Schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hang, err := inserter.Insert(t.Context(), HangArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	strict, err := inserter.Insert(t.Context(), StrictArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A job snoozed once before it blocks: River lowers its attempt back to
	// 1, so the adapter must write its attempt's start before it runs.
	snoozing, err := inserter.Insert(t.Context(), HangArgs{Snooze: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A job of one attempt in River's count: the rescuer discards it.
	single, err := inserter.Insert(t.Context(), HangArgs{}, &river.InsertOpts{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+env.Pool.Config().ConnString()+" "+env.Schema)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	working := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "working ") {
				working <- sc.Text()
			}
		}
	}()
	for range 4 {
		select {
		case <-working:
		case <-time.After(30 * time.Second):
			t.Fatal("the worker process did not start the four jobs within 30 s")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// A first attempt is written at its end: the killed ones left no row;
	// the snoozed job's attempt was written before it ran.
	var runs int
	if err := env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM runs`).Scan(&runs); err != nil || runs != 1 {
		t.Fatalf("runs after the kill: %d, %v; want the snoozed job's only (first attempts are written at their end)", runs, err)
	}
	if status, as := shadow(t, env, snoozing.Job.ID); status != "running" || statuses(as) != "snoozed,running" {
		t.Fatalf("the snoozed job after the kill: run %s, attempts %s; want running, snoozed then running", status, statuses(as))
	}
	time.Sleep(1200 * time.Millisecond) // past the stuck-job timeout before the rescuer's first pass

	c, r, err := hangClient(env.Pool, env.Schema, false, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		h, err := c.JobGet(t.Context(), hang.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.JobGet(t.Context(), strict.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		z, err := c.JobGet(t.Context(), snoozing.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if h.State == rivertype.JobStateCompleted && s.State == rivertype.JobStateCancelled && z.State == rivertype.JobStateCompleted {
			if h.Attempt != 2 {
				t.Errorf("River's attempt of the rescued job: %d; want 2 (River counts the lost one)", h.Attempt)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("90 s after the restart: hang %s, hang_strict %s; want completed, cancelled", h.State, s.State)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The job River discarded at its rescue had no run: the reconciler
	// records it from River's errors.
	if j, err := c.JobGet(t.Context(), single.Job.ID); err != nil || j.State != rivertype.JobStateDiscarded {
		t.Fatalf("the job of one attempt: %v, %v; want discarded by the rescuer", j.State, err)
	}
	if got, err := r.Reconcile(t.Context()); err != nil || got.Adopted != 1 {
		t.Fatalf("Reconcile: %+v, %v; want the discarded job adopted", got, err)
	}
	if status, as := shadow(t, env, single.Job.ID); status != "failed" || statuses(as) != "lost" {
		t.Errorf("the job of one attempt: run %s, attempts %s; want failed, one lost", status, statuses(as))
	}
	if reason, _, _, rescues, _ := failureOf(t, env, single.Job.ID); reason != "rescues_exhausted" || rescues != 1 {
		t.Errorf("the job of one attempt's failure: %s, %d rescues; want rescues_exhausted, 1", reason, rescues)
	}

	if status, as := shadow(t, env, snoozing.Job.ID); status != "completed" || statuses(as) != "snoozed,lost,succeeded" || !as[2].Rescue {
		t.Errorf("the snoozed job: run %s, attempts %+v; want completed: snoozed, lost, succeeded (a rescue)", status, as)
	}

	status, as := shadow(t, env, hang.Job.ID)
	if status != "completed" || statuses(as) != "lost,succeeded" || as[0].Rescue || !as[1].Rescue {
		t.Errorf("kind hang: run %s, attempts %+v; want completed, lost then succeeded (a rescue)", status, as)
	}
	status, as = shadow(t, env, strict.Job.ID)
	if status != "failed" || statuses(as) != "lost" {
		t.Errorf("kind hang_strict: run %s, attempts %s; want failed, one lost", status, statuses(as))
	}
	reason, attempts, errs, rescues, _ := failureOf(t, env, strict.Job.ID)
	if reason != "rescues_exhausted" || attempts != 1 || errs != 0 || rescues != 1 {
		t.Errorf("kind hang_strict's failure: %s, %d attempts, %d errors, %d rescues; want rescues_exhausted, 1, 0, 1", reason, attempts, errs, rescues)
	}
}
