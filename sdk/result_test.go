package sdk_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// A caller starting one run after another and waiting for each is woken by
// each run's notice: with a poll interval of a minute, a missed notice would
// stall the test past its deadline.
func TestResult_SequentialCallsAreWokenByTheirNotice(t *testing.T) {
	c, pool, schema := newClient(t, sdk.WithPollInterval(time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	w, err := runtime.NewWorker(pool, testWorker(schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(Ship); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })

	var took []time.Duration
	for i := range 40 {
		begin := time.Now()
		run, err := sdk.Start(ctx, c, Ship, OrderIn{ID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		out, err := run.Result(ctx)
		if err != nil || out != fmt.Sprintf("shipped %d", i) {
			t.Fatalf("run %d: %q, %v", i, out, err)
		}
		took = append(took, time.Since(begin))
	}
	slices.Sort(took)
	p50, p90 := took[len(took)/2], took[len(took)*9/10]
	t.Logf("Start→Result: p50 %s, p90 %s, max %s", p50, p90, took[len(took)-1])
	if p90 > 500*time.Millisecond {
		t.Fatalf("p90 %s: want well under the poll interval", p90)
	}
}

// complete ends a queued run as a worker would, without its notice.
func complete(t *testing.T, pool *pgxpool.Pool, schema string, id uuid.UUID) {
	t.Helper()
	_, err := pool.Exec(t.Context(), "UPDATE "+pgx.Identifier{schema}.Sanitize()+`.runs
		SET status = 'completed', output = '"done"', finished_at = now() WHERE id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
}

// listener returns the backend PID of the client's LISTEN connection, 0 when
// there is none.
func listener(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	var pid int
	err := pool.QueryRow(t.Context(), `SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+pgx.Identifier{schema + "_done"}.Sanitize()).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// result waits for run in the background.
func result(ctx context.Context, run *sdk.Run[string]) chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := run.Result(ctx)
		ch <- err
	}()
	return ch
}

// A notice may name many runs joined by ",": each of them wakes.
func TestResult_NoticeNamingManyRuns(t *testing.T) {
	c, pool, schema := newClient(t, sdk.WithPollInterval(time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	runs, err := sdk.StartMany(ctx, c, Ship, []sdk.StartParams[OrderIn]{{}, {}, {}})
	if err != nil {
		t.Fatal(err)
	}
	waiting := []chan error{result(ctx, runs[0]), result(ctx, runs[1])}
	for listener(t, pool, schema) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let the waiters read the runs as queued
	complete(t, pool, schema, runs[0].ID)
	complete(t, pool, schema, runs[1].ID)
	_, err = pool.Exec(ctx, "SELECT pg_notify($1, $2)", schema+"_done",
		fmt.Sprintf("%s,not-a-uuid,%s", runs[0].ID, runs[1].ID))
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range waiting {
		if err := <-ch; err != nil {
			t.Fatalf("Result: %v", err)
		}
	}
}

// When the LISTEN connection is lost, the reconnected listener wakes every
// waiter to re-read: a notice sent while it was away is not waited for.
func TestResult_ReconnectWakesWaiters(t *testing.T) {
	c, pool, schema := newClient(t, sdk.WithPollInterval(time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	run, err := sdk.Start(ctx, c, Ship, OrderIn{})
	if err != nil {
		t.Fatal(err)
	}
	waiting := result(ctx, run)
	var pid int
	for pid == 0 {
		pid = listener(t, pool, schema)
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let the waiter read the run as queued
	complete(t, pool, schema, run.ID) // no notice
	if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("Result: %v", err)
	}
}

// The LISTEN connection outlives its last waiter for the idle period, then
// closes; Close closes it at once and may be called twice.
func TestClient_ListenerIdlesThenCloses(t *testing.T) {
	c, pool, schema := newClient(t, sdk.WithPollInterval(time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	sdk.SetListenIdle(c, 300*time.Millisecond)
	run, err := sdk.Start(ctx, c, Ship, OrderIn{})
	if err != nil {
		t.Fatal(err)
	}
	complete(t, pool, schema, run.ID)
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}
	for listener(t, pool, schema) == 0 { // it may still be connecting
		time.Sleep(5 * time.Millisecond)
	}
	for listener(t, pool, schema) != 0 {
		if ctx.Err() != nil {
			t.Fatal("the idle listener never closed")
		}
		time.Sleep(20 * time.Millisecond)
	}

	sdk.SetListenIdle(c, time.Hour)
	if _, err := run.Result(ctx); err != nil {
		t.Fatal(err)
	}
	for listener(t, pool, schema) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	c.Close()
	c.Close()
	// The server ends the backend shortly after the connection closes.
	for deadline := time.Now().Add(2 * time.Second); listener(t, pool, schema) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("listener still open after Close")
		}
	}
}
