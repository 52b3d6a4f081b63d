package pgtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// execOn runs statements on a new connection to dsn, failing the test on
// the first error.
func execOn(t *testing.T, dsn string, sqls ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// insertRows commits rows from to through in one transaction each, as a
// client whose every commit is acknowledged.
func insertRows(t *testing.T, dsn string, from, through int) {
	t.Helper()
	ctx := context.Background()
	conn, err := connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for i := from; i <= through; i++ {
		if _, err := conn.Exec(ctx, "INSERT INTO kv VALUES ($1)", i); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
}

// rowsOn returns the count and the largest k of kv on the server of dsn.
func rowsOn(t *testing.T, dsn string) (n, last int) {
	t.Helper()
	ctx := context.Background()
	conn, err := connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT count(*), coalesce(max(k), 0) FROM kv").Scan(&n, &last); err != nil {
		t.Fatal(err)
	}
	return n, last
}

// dataDirectory names the data directory of the server a connection to dsn
// reaches.
func dataDirectory(t *testing.T, dsn string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// failover stops the primary as in a crash and promotes the standby.
func failover(t *testing.T, rep *Replicated) {
	t.Helper()
	start := time.Now()
	if err := rep.StopPrimary("immediate"); err != nil {
		t.Fatal(err)
	}
	if err := rep.Promote(); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover in %v", time.Since(start).Round(time.Millisecond))
}

func startPair(t *testing.T, sync bool) *Replicated {
	t.Helper()
	start := time.Now()
	rep := Replicate(t, sync)
	t.Logf("pair (sync %v) started in %v", sync, time.Since(start).Round(time.Millisecond))
	return rep
}

// With a synchronous standby, every commit the primary acknowledged is on
// the standby once promoted, and a client on URL writes there.
func TestReplicated_SyncFailoverKeepsAcknowledgedCommits(t *testing.T) {
	t.Parallel()
	rep := startPair(t, true)
	if got := dataDirectory(t, rep.URL()); got != rep.primary.data {
		t.Fatalf("URL reaches %s before the failover, want the primary %s", got, rep.primary.data)
	}
	execOn(t, rep.URL(), "CREATE TABLE kv (k int PRIMARY KEY)")
	insertRows(t, rep.URL(), 1, 50)

	failover(t, rep) // no WaitCaughtUp: the acknowledgements are the guarantee
	if n, last := rowsOn(t, rep.StandbyURL()); n != 50 || last != 50 {
		t.Fatalf("promoted standby has %d rows up to %d; want the 50 acknowledged", n, last)
	}
	if got := dataDirectory(t, rep.URL()); got != rep.standby.data {
		t.Fatalf("URL reaches %s after the failover, want the promoted standby %s", got, rep.standby.data)
	}
	insertRows(t, rep.URL(), 51, 51)
	if n, _ := rowsOn(t, rep.StandbyURL()); n != 51 {
		t.Fatalf("promoted standby has %d rows after a write through URL, want 51", n)
	}
}

// With asynchronous replication cut, the commits the primary acknowledged
// after the cut are lost by a promotion, and those before it are kept: the
// loss a failover test must be able to produce.
func TestReplicated_AsyncFailoverAfterCutLosesLaterCommits(t *testing.T) {
	t.Parallel()
	rep := startPair(t, false)
	execOn(t, rep.PrimaryURL(), "CREATE TABLE kv (k int PRIMARY KEY)")
	insertRows(t, rep.PrimaryURL(), 1, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rep.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := rowsOn(t, rep.StandbyURL()); n != 10 {
		t.Fatalf("caught-up standby has %d rows, want 10", n)
	}

	if err := rep.CutReplication(); err != nil {
		t.Fatal(err)
	}
	insertRows(t, rep.PrimaryURL(), 11, 20)
	if n, _ := rowsOn(t, rep.PrimaryURL()); n != 20 {
		t.Fatalf("primary has %d rows, want 20", n)
	}

	failover(t, rep)
	if n, last := rowsOn(t, rep.StandbyURL()); n != 10 || last != 10 {
		t.Fatalf("promoted standby has %d rows up to %d; want rows 1 to 10, and 11 to 20 lost", n, last)
	}
	insertRows(t, rep.URL(), 11, 11) // the lost key is free again
}

// The standby takes reads and refuses writes with SQLSTATE 25006 until it
// is promoted; in between, URL finds no server that takes writes.
func TestReplicated_StandbyRefusesWritesUntilPromoted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rep := startPair(t, false)
	execOn(t, rep.PrimaryURL(), "CREATE TABLE kv (k int PRIMARY KEY)")
	if err := rep.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}

	conn, err := connect(ctx, rep.StandbyURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
		t.Fatalf("pg_is_in_recovery() = %v, %v on the standby; want true", inRecovery, err)
	}
	var pgErr *pgconn.PgError
	_, err = conn.Exec(ctx, "INSERT INTO kv VALUES (1)")
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("insert on the standby: %v; want SQLSTATE 25006 (read_only_sql_transaction)", err)
	}

	if err := rep.StopPrimary("fast"); err != nil {
		t.Fatal(err)
	}
	if c, err := connect(ctx, rep.URL()); err == nil {
		c.Close(ctx)
		t.Fatal("URL connected while the primary is stopped and the standby not promoted")
	}
	if err := rep.Promote(); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO kv VALUES (1)"); err != nil {
		t.Fatalf("insert on the promoted standby, on a connection opened before the promotion: %v", err)
	}
}

// A pair whose test process died is stopped and removed by the next private
// cluster's reaper, standby included.
func TestReplicated_OrphanPairIsReaped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := newRunner(fallbackGlob)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := r.newClusterDir(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.startReplicated(dir, false)
	if err != nil {
		_ = r.removeFolder(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(dir); err == nil {
			_ = rep.Stop()
		}
	})

	// A finished process's pid stands in for a killed test process.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if err := os.WriteFile(filepath.Join(dir, pidFileName), []byte(strconv.Itoa(dead.Process.Pid)+"\n"+host+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.reapOrphans(os.TempDir()) // TestReapOrphans may reap it first: look at the folder
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("orphan pair %s still there (stat: %v)", dir, err)
	}
	for name, dsn := range map[string]string{"primary": rep.PrimaryURL(), "standby": rep.StandbyURL()} {
		if conn, err := connect(ctx, dsn); err == nil {
			conn.Close(ctx)
			t.Errorf("orphan %s still accepts connections", name)
		}
	}
}
