package tenuretest

import (
	"testing"

	"github.com/tenurehq/tenure/internal/pgtest"
)

// TB is the part of testing.TB the kit uses: *testing.T, *testing.B and
// *testing.F implement it. Helpers fail the test with Fatalf, from the
// goroutine running the test.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// EnvVar names the environment variable holding the URL of an existing
// PostgreSQL server to test against. When it is unset, the first Env of the
// test process starts a private throwaway cluster.
const EnvVar = pgtest.EnvVar

// URL returns the connection string of the test database: DATABASE_URL when
// it is set; else the first call of the test process starts a private
// throwaway cluster from the PostgreSQL server programs (initdb, pg_ctl,
// postgres) on PATH or under /usr/lib/postgresql/*/bin, listening only on a
// unix socket, and every call returns its URL. Stop that cluster with Main.
// When no database can be had, URL fails the test, saying how to fix it: a
// test of the kit is never skipped for want of a database.
func URL(t TB) string {
	t.Helper()
	u, err := pgtest.SharedURL()
	if err != nil {
		t.Fatalf("tenuretest: no test database: %v", err)
	}
	return u
}

// Main runs the tests with m.Run, then stops the private cluster this
// process started (if any) and removes its folder; it returns m.Run's exit
// code. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(tenuretest.Main(m)) }
//
// Without it, a private cluster outlives its test process until the next
// one started on the machine finds it orphaned and removes it.
func Main(m *testing.M) int { return pgtest.Main(m) }
