package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// replicationConf overrides serverConf on a replicated pair's primary with
// what a failover test counts on: a commit is durable on the primary's WAL
// (synchronous_commit) and streamed to the standby (wal_level,
// max_wal_senders: pg_basebackup takes two senders, the standby one), and
// the standby, which copies this configuration, takes queries (hot_standby).
// fsync and full_page_writes stay off: the servers are killed, never their
// OS, so what they wrote survives in the page cache.
var replicationConf = []string{
	"synchronous_commit = on",
	"wal_level = replica",
	"max_wal_senders = 10",
	"max_replication_slots = 10",
	"hot_standby = on",
}

// standbyName names the standby's folder, slot and application_name.
const standbyName = "standby"

// Replicated is a private primary with one streaming standby, for tests of
// failover: stop the primary, promote the standby, and see what a client
// that follows [Replicated.URL] finds there.
//
// Both servers listen on unix sockets only, each in a folder of its own
// under one parent folder, which [Replicated.Stop] removes; if the test
// process dies first, the next private cluster started on the machine stops
// both and removes it, as it does for a private cluster.
type Replicated struct {
	primary *cluster
	standby *cluster
	sync    bool
}

// StartReplicated starts a private primary and a standby made from it with
// pg_basebackup, streaming from it through a replication slot, and returns
// once the standby is streaming (and, with sync, is the primary's
// synchronous standby). Stop it with [Replicated.Stop].
//
// With sync, the primary has synchronous_standby_names = '*': a commit is
// acknowledged only once the standby has flushed it, so a promotion loses
// no acknowledged commit. Without, replication is asynchronous: a commit
// the standby has not received when the primary stops is lost by the
// promotion. The standby has no synchronous standby of its own, so that it
// takes commits once promoted.
//
// It needs pg_basebackup beside initdb; it fails, saying how to fix the
// machine, when it is missing.
func StartReplicated(sync bool) (*Replicated, error) {
	r, err := newRunner(fallbackGlob)
	if err != nil {
		return nil, fmt.Errorf("a replicated pair is always private, whatever DATABASE_URL says: %w", err)
	}
	if !isExecutable(filepath.Join(r.binDir, "pg_basebackup")) {
		return nil, fmt.Errorf("pg_basebackup is not in %s beside initdb, and a replicated pair is made with it; "+
			"to fix: install the PostgreSQL client programs of the same version (e.g. apt-get install postgresql-client)", r.binDir)
	}
	tmp := os.TempDir()
	r.reapOrphans(tmp)
	dir, err := r.newClusterDir(tmp)
	if err != nil {
		return nil, err
	}
	rep, err := r.startReplicated(dir, sync)
	if err != nil {
		_ = r.removeFolder(dir)
		return nil, fmt.Errorf("start a replicated pair: %w", err)
	}
	return rep, nil
}

// Replicate is StartReplicated for a test: it stops the pair and removes its
// folders when the test and its subtests finish. Failing to start the pair
// fails the test, saying how to fix the machine; it never skips.
func Replicate(t testing.TB, sync bool) *Replicated {
	t.Helper()
	rep, err := StartReplicated(sync)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := rep.Stop(); err != nil {
			t.Errorf("pgtest: stop replicated pair: %v", err)
		}
	})
	return rep
}

// startReplicated starts the primary in dir (made by newClusterDir), laid
// out as a private cluster, and the standby in dir/standby. On failure the
// caller removes dir with removeFolder, which stops both.
func (r *runner) startReplicated(dir string, sync bool) (*Replicated, error) {
	conf := slices.Clone(replicationConf)
	if sync {
		conf = append(conf, "synchronous_standby_names = '*'")
	}
	primary, err := r.startCluster(dir, conf...)
	if err != nil {
		return nil, fmt.Errorf("primary: %w", err)
	}
	rep := &Replicated{primary: primary, sync: sync}
	if rep.standby, err = r.startStandby(primary, filepath.Join(dir, standbyName)); err != nil {
		return nil, fmt.Errorf("standby: %w", err)
	}
	if err := rep.waitStreaming(); err != nil {
		return nil, err
	}
	return rep, nil
}

// startStandby copies primary into dir with pg_basebackup and starts it as
// a hot standby streaming from primary.
//
// initdb --auth=trust writes "local replication all trust" (PostgreSQL 10
// and later), which lets pg_basebackup and the standby in.
func (r *runner) startStandby(primary *cluster, dir string) (*cluster, error) {
	s := &cluster{
		r:    r,
		dir:  dir,
		data: filepath.Join(dir, "data"),
		sock: filepath.Join(dir, "sock"),
		log:  filepath.Join(dir, "postgres.log"),
	}
	if n := len(s.sock) + len("/.s.PGSQL.") + len(strconv.Itoa(port)); n > maxSocketPath {
		return nil, fmt.Errorf("socket path under %s is %d bytes, over PostgreSQL's limit of %d; "+
			"set TMPDIR to a shorter folder", dir, n, maxSocketPath)
	}
	for _, d := range []string{s.dir, s.sock} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, fmt.Errorf("create standby folder: %w", err)
		}
		if err := r.give(d); err != nil {
			return nil, err
		}
	}
	// -R writes primary_conninfo and primary_slot_name, and standby.signal;
	// -C makes the slot, so that the primary keeps the WAL the standby needs.
	if err := r.run(dir, 2*time.Minute, "pg_basebackup", "-D", s.data, "-h", primary.sock, "-p", strconv.Itoa(port),
		"-U", "postgres", "-R", "-X", "stream", "-C", "-S", standbyName, "-c", "fast", "--no-sync"); err != nil {
		return nil, err
	}
	// The copied postgresql.conf is the primary's: the standby needs its own
	// socket, and no synchronous standby once promoted, or every commit on
	// it would wait for one that does not exist.
	conf := "\n# pgtest standby\n" +
		"unix_socket_directories = " + quoteConf(s.sock) + "\n" +
		"synchronous_standby_names = ''\n" +
		"cluster_name = " + quoteConf(standbyName) + "\n"
	if err := appendFile(filepath.Join(s.data, "postgresql.conf"), conf); err != nil {
		return nil, err
	}
	if err := r.run(dir, 2*time.Minute, "pg_ctl", "start", "-D", s.data, "-l", s.log, "-w", "-t", "90", "-s"); err != nil {
		log, _ := os.ReadFile(s.log)
		return nil, fmt.Errorf("%w\nserver log:\n%s", err, tail(string(log), 2000))
	}
	s.url = socketURL(s.sock)
	return s, nil
}

// socketURL is the connection string of the server on the socket in sock.
func socketURL(sock string) string {
	return "postgres://postgres@/postgres?host=" + url.QueryEscape(sock) + "&sslmode=disable"
}

// PrimaryURL returns the connection string of the primary.
func (rep *Replicated) PrimaryURL() string { return rep.primary.url }

// StandbyURL returns the connection string of the standby, which refuses
// writes (SQLSTATE 25006, read_only_sql_transaction) until [Replicated.Promote].
func (rep *Replicated) StandbyURL() string { return rep.standby.url }

// URL returns a connection string that names both servers, primary first,
// with target_session_attrs=read-write: pgx (pgconn) connects to whichever
// of them takes writes, so that a client opening new connections with it
// follows a promotion, as a client of a managed database follows its DNS
// name. While the primary is stopped and the standby not yet promoted,
// connecting fails.
func (rep *Replicated) URL() string {
	p := strconv.Itoa(port)
	return "postgres://postgres@/postgres?host=" + url.QueryEscape(rep.primary.sock+","+rep.standby.sock) +
		"&port=" + p + "," + p + "&target_session_attrs=read-write&sslmode=disable"
}

// StopPrimary stops the primary with pg_ctl stop in mode "immediate" (its
// processes are killed without a checkpoint, as in a crash) or "fast"
// (connections are closed and it shuts down cleanly, sending the standby
// all its WAL first). Its folder is kept until [Replicated.Stop].
func (rep *Replicated) StopPrimary(mode string) error {
	if mode != "immediate" && mode != "fast" {
		return fmt.Errorf("stop primary: mode %q: want immediate or fast", mode)
	}
	c := rep.primary
	if err := c.r.run(c.dir, time.Minute, "pg_ctl", "stop", "-D", c.data, "-m", mode, "-w", "-s"); err != nil {
		return fmt.Errorf("stop primary: %w", err)
	}
	return nil
}

// Promote promotes the standby with pg_ctl promote and returns once it
// accepts writes. The standby first replays all the WAL it has received.
// The primary should be stopped first: nothing stops it from taking writes
// of its own, and the two then diverge.
func (rep *Replicated) Promote() error {
	s := rep.standby
	if err := s.r.run(s.dir, 2*time.Minute, "pg_ctl", "promote", "-D", s.data, "-w", "-t", "90", "-s"); err != nil {
		log, _ := os.ReadFile(s.log)
		return fmt.Errorf("promote standby: %w\nserver log:\n%s", err, tail(string(log), 2000))
	}
	err := poll(context.Background(), s.url, func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		var readOnly string
		err := conn.QueryRow(ctx, "SHOW transaction_read_only").Scan(&readOnly)
		return readOnly == "off", err
	})
	if err != nil {
		return fmt.Errorf("promote standby: it does not accept writes: %w", err)
	}
	return nil
}

// CutReplication stops the standby receiving WAL and returns once it has
// no WAL receiver: commits on the primary after it returns never reach the
// standby, so that a promotion without a sync pair loses them. It points the
// standby's primary_conninfo (ALTER SYSTEM, then a reload) at a socket folder
// that does not exist, which ends its WAL receiver and fails every attempt
// to start one again.
//
// On a sync pair, commits on the primary wait from then on for a
// synchronous standby that never comes back: they are neither acknowledged
// nor failed until the primary stops.
func (rep *Replicated) CutReplication() error {
	nowhere := filepath.Join(rep.standby.dir, "nowhere")
	conninfo := "host=" + quoteConnValue(nowhere) + " port=" + strconv.Itoa(port) + " user=postgres"
	err := poll(context.Background(), rep.standby.url, func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		if _, err := conn.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = "+quoteConf(conninfo)); err != nil {
			return false, err
		}
		_, err := conn.Exec(ctx, "SELECT pg_reload_conf()")
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("cut replication: %w", err)
	}
	err = poll(context.Background(), rep.standby.url, func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		var receivers int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver").Scan(&receivers)
		return receivers == 0, err
	})
	if err != nil {
		return fmt.Errorf("cut replication: the standby's WAL receiver does not stop: %w", err)
	}
	// The primary's sender notices the receiver's end as the socket closes.
	err = poll(context.Background(), rep.primary.url, func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		var senders int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1", standbyName).Scan(&senders)
		return senders == 0, err
	})
	if err != nil {
		return fmt.Errorf("cut replication: the primary still sends WAL: %w", err)
	}
	return nil
}

// WaitCaughtUp returns once the standby has replayed all the WAL the primary
// has flushed when it is called (pg_current_wal_flush_lsn on the primary,
// pg_last_wal_replay_lsn on the standby), so that every commit acknowledged
// before the call is visible on the standby. It waits until ctx is done
// when the standby no longer receives WAL.
func (rep *Replicated) WaitCaughtUp(ctx context.Context) error {
	var target string
	err := poll(ctx, rep.primary.url, func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		err := conn.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&target)
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("wait for the standby: read the primary's WAL position: %w", err)
	}
	var replayed string
	err = poll(ctx, rep.standby.url, func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		var done bool
		err := conn.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn()::text, 'nothing'), "+
			"coalesce(pg_last_wal_replay_lsn() >= $1::text::pg_lsn, false)",
			target).Scan(&replayed, &done)
		return done, err
	})
	if err != nil {
		return fmt.Errorf("wait for the standby to replay the primary's WAL up to %s (replayed %s): %w", target, replayed, err)
	}
	return nil
}

// Stop stops both servers and removes their folders.
func (rep *Replicated) Stop() error { return rep.primary.r.removeFolder(rep.primary.dir) }

// waitStreaming returns once the primary streams to the standby, as its
// synchronous standby on a sync pair.
func (rep *Replicated) waitStreaming() error {
	want := "async"
	if rep.sync {
		want = "sync"
	}
	var state string
	err := poll(context.Background(), rep.primary.url, func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		err := conn.QueryRow(ctx, "SELECT coalesce((SELECT state || ' ' || sync_state FROM pg_stat_replication "+
			"WHERE application_name = $1), 'none')", standbyName).Scan(&state)
		return state == "streaming "+want, err
	})
	if err != nil {
		return fmt.Errorf("the standby does not stream from the primary (pg_stat_replication: %s; want streaming %s): %w", state, want, err)
	}
	return nil
}

// poll calls check on a connection to dsn every 20ms until it returns true,
// reconnecting when the connection is lost. It gives up after opTimeout, or
// when ctx is done, with the last error.
func poll(ctx context.Context, dsn string, check func(context.Context, *pgx.Conn) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
		}
	}()
	var last error
	for {
		if conn == nil || conn.IsClosed() {
			conn, last = pgx.Connect(ctx, dsn)
			if last != nil {
				conn = nil
			}
		}
		if conn != nil {
			var ok bool
			if ok, last = check(ctx, conn); ok && last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if last == nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
