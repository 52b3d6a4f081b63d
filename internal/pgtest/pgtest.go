package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvVar is the environment variable naming an existing PostgreSQL server to
// test against. When it is unset, a private throwaway cluster is started.
const EnvVar = "DATABASE_URL"

// opTimeout bounds the connections and statements pgtest itself runs.
const opTimeout = 30 * time.Second

// The private cluster shared by every test of this process.
var (
	sharedOnce sync.Once
	shared     *cluster
	sharedErr  error
)

// URL returns a connection string for the test database.
//
// When DATABASE_URL is set, URL returns it. Otherwise the first call in the
// process starts a private throwaway cluster (see the package documentation)
// and every call returns its URL, of the form
// postgres://postgres@/postgres?host=<socket dir>&sslmode=disable.
// If no database can be had, URL fails the test with t.Fatalf, explaining how
// to fix it; it never skips.
func URL(t testing.TB) string {
	t.Helper()
	u, err := SharedURL()
	if err != nil {
		t.Fatalf("pgtest: no test database: %v", err)
	}
	return u
}

// SharedURL is URL for code that has no testing.TB, such as Example
// functions: it returns the error instead of failing a test. The private
// cluster it may start is stopped by Main.
func SharedURL() (string, error) {
	if u := os.Getenv(EnvVar); u != "" {
		return u, nil
	}
	sharedOnce.Do(func() {
		start := time.Now()
		shared, sharedErr = startPrivate()
		if sharedErr == nil {
			shared.startup = time.Since(start)
		}
	})
	if sharedErr != nil {
		return "", sharedErr
	}
	return shared.url, nil
}

// Start starts a private throwaway cluster, whatever DATABASE_URL says, and
// returns its URL and a function that stops it and removes its folder. It is
// for programs, such as the demo, that need a database of their own.
func Start() (url string, stop func() error, err error) {
	c, err := startPrivate()
	if err != nil {
		return "", nil, err
	}
	return c.url, c.destroy, nil
}

// Schema creates a new, uniquely named schema ("t_" followed by random hex)
// in the database of [URL], arranges for it to be dropped with CASCADE when
// the test and its subtests finish, and returns its name. The name needs no
// quoting. Failing to create the schema fails the test; failing to drop it
// is reported as a test error.
func Schema(t testing.TB) string {
	t.Helper()
	dsn := URL(t)
	name := "t_" + randomHex(8)
	ident := pgx.Identifier{name}.Sanitize()
	if err := execOnce(dsn, "CREATE SCHEMA "+ident); err != nil {
		t.Fatalf("pgtest: create schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := execOnce(dsn, "DROP SCHEMA IF EXISTS "+ident+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return name
}

// Pool returns a connection pool to the database of [URL], already checked
// with a ping, and closes it when the test and its subtests finish.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v (%s)", err, hint(dsn))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		t.Fatalf("pgtest: connect: %v (%s)", err, hint(dsn))
	}
	t.Cleanup(pool.Close)
	return pool
}

// Main runs the tests with m.Run and then, if this process started a private
// cluster, stops it and removes its directory. It returns m.Run's exit code.
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	// Keep any late URL call from starting a cluster nobody would stop.
	sharedOnce.Do(func() { sharedErr = errors.New("pgtest.Main has already finished") })
	if shared != nil {
		if err := shared.destroy(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping private cluster: %v\n", err)
		}
	}
	return code
}

// execOnce runs one statement on a fresh connection.
func execOnce(dsn, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect: %w (%s)", err, hint(dsn))
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// hint says where the connection string came from, without echoing it
// (DATABASE_URL may hold a password).
func hint(dsn string) string {
	if os.Getenv(EnvVar) == dsn {
		return "database from " + EnvVar + "; check that it is reachable, or unset it to use a private cluster"
	}
	return "private pgtest cluster"
}

// randomHex returns n random bytes, hex encoded.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// ProgramURL is for the example programs: it returns DATABASE_URL when set,
// otherwise it starts a private cluster (Start), telling out so, and private
// is true. stop stops that cluster and is a no-op for DATABASE_URL. The error
// says how to fix a machine with neither.
func ProgramURL(out io.Writer) (url string, private bool, stop func(), err error) {
	if u := os.Getenv(EnvVar); u != "" {
		return u, false, func() {}, nil
	}
	fmt.Fprintln(out, "DATABASE_URL is not set: starting a private PostgreSQL cluster (removed on exit)…")
	u, stopCluster, err := Start()
	if err != nil {
		return "", false, nil, fmt.Errorf("no database: set DATABASE_URL or install PostgreSQL: %w", err)
	}
	return u, true, func() { _ = stopCluster() }, nil
}
