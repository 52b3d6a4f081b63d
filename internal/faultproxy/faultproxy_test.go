package faultproxy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/internal/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// defaultDatabaseURL is the server the tests use when DATABASE_URL is unset.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// queryDeadline is the context deadline of the queries a black hole stalls.
const queryDeadline = 300 * time.Millisecond

// slack is how long after its deadline a stalled call may take to return, on
// a loaded machine under -race; pgx itself returns within milliseconds.
const slack = 2 * time.Second

// databaseURL returns the URL of the test server, which must be reached over
// TCP for the proxy to stand in front of it.
func databaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return defaultDatabaseURL
}

// startPG starts a proxy in front of the test server, closed when the test ends,
// and returns it with the URL that goes through it.
func startPG(t *testing.T) (*faultproxy.Proxy, string) {
	t.Helper()
	dbURL := databaseURL()
	cfg, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("parse DATABASE_URL: %v", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		t.Fatalf("DATABASE_URL names a unix socket (%s); faultproxy needs a TCP server, e.g. %s", cfg.Host, defaultDatabaseURL)
	}
	p := start(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	u, err := p.URL(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return p, u
}

// start starts a proxy to target, closed when the test ends.
func start(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return p
}

// connect opens a pgx connection to url, closed when the test ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// selectOne runs SELECT 1 on conn with a deadline of d.
func selectOne(conn *pgx.Conn, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// startEchoProxy starts an echo server and a proxy in front of it, both
// closed when the test ends.
func startEchoProxy(t *testing.T) (*faultproxy.Proxy, *echo) {
	t.Helper()
	e, err := startEcho()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return start(t, e.Addr()), e
}

// dial connects to the proxy, closed when the test ends.
func dial(t *testing.T, p *faultproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg on c and reads it back from the echo server.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	got, err := readN(c, len(msg), 5*time.Second)
	if err != nil || got != msg {
		t.Fatalf("read back %q, %v; want %q", got, err, msg)
	}
}

// readN reads n bytes from c within d.
func readN(c net.Conn, n int, d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	b := make([]byte, n)
	k, err := io.ReadFull(c, b)
	return string(b[:k]), err
}

// wantSilence checks that nothing arrives on c within d: no byte, no FIN, no RST.
func wantSilence(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	got, err := readN(c, 1, d)
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("read %q, %v; want silence until the read deadline", got, err)
	}
}

// wantReset checks that c was reset.
func wantReset(t *testing.T, c net.Conn) {
	t.Helper()
	got, err := readN(c, 1, 5*time.Second)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read %q, %v; want a connection reset", got, err)
	}
}

func TestProxy_ForwardsQueries(t *testing.T) {
	t.Parallel()
	p, url := startPG(t)
	conn := connect(t, url)

	var n int64
	var s string
	// A result far larger than one copy buffer, to see it streamed whole.
	err := conn.QueryRow(t.Context(),
		"SELECT count(*), string_agg(md5(i::text), '') FROM generate_series(1, 50000) i").Scan(&n, &s)
	if err != nil {
		t.Fatal(err)
	}
	if n != 50000 || len(s) != 50000*32 {
		t.Fatalf("got count %d and %d bytes; want 50000 and %d", n, len(s), 50000*32)
	}
	if st := p.Stats(); st.Open != 1 || st.Dropped != 0 {
		t.Fatalf("stats %+v; want one open connection and nothing dropped", st)
	}
}

func TestBlackhole_QueryFailsByItsDeadlineAndBreaksTheConnection(t *testing.T) {
	t.Parallel()
	p, url := startPG(t)
	conn := connect(t, url)
	if err := selectOne(conn, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	p.Blackhole()
	began := time.Now()
	err := selectOne(conn, queryDeadline)
	took := time.Since(began)
	t.Logf("query on a black-holed connection returned %v after its %v deadline: %v", took-queryDeadline, queryDeadline, err)

	if !errors.Is(err, context.DeadlineExceeded) || !pgconn.Timeout(err) {
		t.Fatalf("got %v; want the context's deadline", err)
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) {
		t.Fatalf("got %v; a black hole must not reset or close", err)
	}
	if took < queryDeadline || took > queryDeadline+slack {
		t.Fatalf("query returned after %v; want its deadline, %v", took, queryDeadline)
	}
	if !conn.IsClosed() {
		t.Fatal("pgx still holds the connection open after a query lost its reply")
	}
	if err := selectOne(conn, queryDeadline); err == nil {
		t.Fatal("a query on the broken connection succeeded")
	}
	if st := p.Stats(); st.Dropped == 0 {
		t.Fatalf("stats %+v; want the query's bytes dropped", st)
	}
}

func TestBlackhole_NewConnectionTimesOut(t *testing.T) {
	t.Parallel()
	p, url := startPG(t)
	p.Blackhole()

	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), queryDeadline)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	took := time.Since(began)
	if err == nil {
		_ = conn.Close(context.Background())
		t.Fatal("connected through a black hole")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v; want the context's deadline", err)
	}
	if took < queryDeadline || took > queryDeadline+slack {
		t.Fatalf("connect returned after %v; want its deadline, %v", took, queryDeadline)
	}
	if st := p.Stats(); st.Accepted == 0 || st.Dropped == 0 {
		t.Fatalf("stats %+v; want the connection accepted and its startup message dropped", st)
	}
}

func TestResume_NewConnectionWorks(t *testing.T) {
	t.Parallel()
	p, url := startPG(t)
	broken := connect(t, url)
	p.Blackhole()
	if err := selectOne(broken, queryDeadline); err == nil {
		t.Fatal("query through a black hole succeeded")
	}

	p.Resume()
	conn := connect(t, url)
	if err := selectOne(conn, 5*time.Second); err != nil {
		t.Fatalf("query after Resume: %v", err)
	}
}

func TestResume_IdleConnectionCarriesOn(t *testing.T) {
	t.Parallel()
	p, url := startPG(t)
	conn := connect(t, url)
	p.Blackhole()
	p.Resume()
	if err := selectOne(conn, 5*time.Second); err != nil {
		t.Fatalf("query on a connection that stayed idle through the black hole: %v", err)
	}
}

func TestCutAll_FailsInFlightQueryAtOnce(t *testing.T) {
	t.Parallel()
	p, url := startPG(t)
	conn := connect(t, url)
	pid := conn.PgConn().PID()

	errc := make(chan error, 1)
	go func() {
		// With an argument, so that pgx uses the extended protocol: with the
		// simple protocol pgx v5.12.0 reports a reset as "conn closed", the
		// original error lost.
		_, err := conn.Exec(context.Background(), "SELECT pg_sleep($1)", 5)
		errc <- err
	}()
	waitActive(t, pid)

	cut := time.Now()
	p.CutAll()
	err := <-errc
	took := time.Since(cut)
	if err == nil {
		t.Fatal("pg_sleep(5) succeeded through a cut connection")
	}
	if errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Fatalf("query failed after %v with %v; want an immediate network error", took, err)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v; want a connection reset", err)
	}
	// No check of Stats().Open here: pgx follows the reset with a cancel
	// request on a new connection, through the proxy.

	again := connect(t, url)
	if err := selectOne(again, 5*time.Second); err != nil {
		t.Fatalf("query on a new connection after CutAll: %v", err)
	}
}

// waitActive waits until the backend pid runs a statement, as seen by a
// connection that does not go through the proxy.
func waitActive(t *testing.T, pid uint32) {
	t.Helper()
	direct := connect(t, databaseURL())
	deadline := time.Now().Add(10 * time.Second)
	for {
		var active bool
		err := direct.QueryRow(t.Context(),
			"SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND state = 'active')", int32(pid)).Scan(&active)
		if err != nil {
			t.Fatal(err)
		}
		if active {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d never became active", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBlackhole_DropsBytesAndKeepsSocketsOpen(t *testing.T) {
	t.Parallel()
	p, _ := startEchoProxy(t)
	c := dial(t, p)
	roundTrip(t, c, "ping")

	p.Blackhole()
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	wantSilence(t, c, 200*time.Millisecond)
	if st := p.Stats(); st.Dropped != 4 || st.Open != 1 {
		t.Fatalf("stats %+v; want 4 bytes dropped and the connection open", st)
	}
}

func TestBlackhole_LosesTheServersClose(t *testing.T) {
	t.Parallel()
	p, e := startEchoProxy(t)
	c := dial(t, p)
	roundTrip(t, c, "ping")

	p.Blackhole()
	e.closeConns()
	wantSilence(t, c, 200*time.Millisecond)
}

func TestBlackhole_AcceptsNewConnectionsButCarriesNothing(t *testing.T) {
	t.Parallel()
	p, _ := startEchoProxy(t)
	p.Blackhole()
	c := dial(t, p)
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	wantSilence(t, c, 200*time.Millisecond)
}

func TestResume_ResetsOnlyConnectionsThatLostSomething(t *testing.T) {
	t.Parallel()
	p, _ := startEchoProxy(t)
	idle := dial(t, p)
	roundTrip(t, idle, "ping")
	talker := dial(t, p)
	roundTrip(t, talker, "ping")

	p.Blackhole()
	if _, err := talker.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	held := dial(t, p) // accepted during the black hole: never reached the server
	wantSilence(t, talker, 100*time.Millisecond)

	p.Resume()
	wantReset(t, talker)
	wantReset(t, held)
	roundTrip(t, idle, "still here")
	roundTrip(t, dial(t, p), "new")
	if st := p.Stats(); st.Open != 2 {
		t.Fatalf("stats %+v; want the idle and the new connection open", st)
	}
}

func TestCutAll_ResetsEveryConnectionAndKeepsListening(t *testing.T) {
	t.Parallel()
	p, _ := startEchoProxy(t)
	a, b := dial(t, p), dial(t, p)
	roundTrip(t, a, "a")
	roundTrip(t, b, "b")

	p.CutAll()
	wantReset(t, a)
	wantReset(t, b)
	if st := p.Stats(); st.Open != 0 {
		t.Fatalf("stats %+v; want no open connection", st)
	}
	roundTrip(t, dial(t, p), "after")
}

func TestProxy_PassesHalfClose(t *testing.T) {
	t.Parallel()
	p, _ := startEchoProxy(t)
	c := dial(t, p)
	if _, err := c.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "last words" {
		t.Fatalf("read %q, %v; want the echo, then EOF", got, err)
	}
}

func TestProxy_TargetDownResetsTheClient(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	_ = ln.Close()

	p := start(t, down)
	// On loopback the reset can come before the dial has returned.
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err == nil {
		defer c.Close()
		_, err = readN(c, 1, 5*time.Second)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v; want a connection reset", err)
	}
}

func TestStart_RejectsATargetWithoutPort(t *testing.T) {
	t.Parallel()
	if p, err := faultproxy.Start("127.0.0.1"); err == nil {
		_ = p.Close()
		t.Fatal("Start accepted a target without a port")
	}
}

func TestProxy_URL(t *testing.T) {
	t.Parallel()
	p := start(t, "127.0.0.1:5432")
	addr := p.Addr()
	for _, tc := range []struct {
		in, want string // want has PROXY for the proxy's address; "" for an error
	}{
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@PROXY/test?sslmode=disable"},
		{"postgresql://u:secret@db.example:6543/app", "postgresql://u:secret@PROXY/app"},
		{"postgres://h1:5432,h2:5433/app", "postgres://PROXY/app"},
		{"postgres:///app?host=/var/run/postgresql&port=5433&sslmode=disable", "postgres://PROXY/app?sslmode=disable"},
		{"mysql://root@127.0.0.1/app", ""},
		{"host=127.0.0.1 port=5432", ""},
		{"postgres://u:secret@[::1/app", ""},
	} {
		got, err := p.URL(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("URL(%q) = %q; want an error", tc.in, got)
		case tc.want == "" && strings.Contains(err.Error(), "secret"):
			t.Errorf("URL(%q) error %q echoes the password", tc.in, err)
		case tc.want != "" && (err != nil || got != strings.Replace(tc.want, "PROXY", addr, 1)):
			t.Errorf("URL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestClose_LeavesNoGoroutineBehind is the one test that does not run in
// parallel: it checks the whole process's goroutines right after Close,
// which needs the other tests paused.
func TestClose_LeavesNoGoroutineBehind(t *testing.T) {
	e, err := startEcho()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p, err := faultproxy.Start(e.Addr())
	if err != nil {
		t.Fatal(err)
	}

	// Every kind of connection: forwarding, black-holed with its bytes
	// lost, accepted during the black hole, and one in the middle of a
	// transfer the client does not read.
	idle := dial(t, p)
	roundTrip(t, idle, "ping")
	busy := dial(t, p)
	// The echo fills the client's receive buffer and the proxy blocks
	// writing to it; the client's own write gives up at its deadline.
	_ = busy.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	_, _ = busy.Write(bytes.Repeat([]byte("x"), 16<<20))
	p.Blackhole()
	lost := dial(t, p)
	if _, err := lost.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	_ = dial(t, p)
	wantSilence(t, lost, 50*time.Millisecond)

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	e.Close()
	goleak.VerifyNone(t)
}
