package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// In session mode a client connection holds its server connection from its
// first statement until it closes: with a pool of two, a third client's
// statement waits until one of the first two closes. The pool's state is
// what the console reports.
func TestPgbouncer_SessionModeHoldsAServerConnectionPerClient(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := Pgbouncer(t, URL(t), "session", WithPoolSize(2))
	var held []*pgx.Conn
	for range 2 {
		conn, err := connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	p, err := ShowPgbouncerPool(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if p.ClientsActive != 2 || p.ServersActive != 2 || p.ClientsWaiting != 0 {
		t.Fatalf("two idle sessions: %+v, want 2 clients each holding 1 of the 2 servers", p)
	}

	third, err := connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := third.Exec(ctx, "SELECT 1")
		done <- err
	}()
	for p.ClientsWaiting != 1 {
		select {
		case err := <-done:
			t.Fatalf("the third client's statement ran (%v) while 2 sessions held the pool of 2", err)
		case <-ctx.Done():
			t.Fatalf("the third client never waited: %+v", p)
		case <-time.After(10 * time.Millisecond):
		}
		if p, err = ShowPgbouncerPool(ctx, url); err != nil {
			t.Fatal(err)
		}
	}
	if err := held[0].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the third client's statement, once a session closed: %v", err)
	}
}

// WithPoolSize refuses a pool that could serve no one.
func TestPgbouncer_WithPoolSizeRefusesAnEmptyPool(t *testing.T) {
	t.Parallel()
	if _, _, err := StartPgbouncer(URL(t), "session", WithPoolSize(0)); err == nil {
		t.Fatal("StartPgbouncer with a pool of 0: no error")
	}
}
