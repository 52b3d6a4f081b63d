// Package pgtest gives Tenure's tests a PostgreSQL database.
//
// # Where the database comes from
//
// When the DATABASE_URL environment variable is set, [URL] returns it
// unchanged and every test talks to that server. This is the fast path for
// CI and for developers who already run Postgres:
//
//	DATABASE_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go test ./...
//
// When DATABASE_URL is unset, the first call to [URL] in a test process
// starts a private, throwaway cluster: initdb and pg_ctl are looked up on
// PATH (falling back to /usr/lib/postgresql/*/bin), a new data directory is
// created under [os.TempDir], and the server listens only on a unix socket in
// that directory (listen_addresses is empty), with durability turned off (fsync,
// synchronous_commit and full_page_writes off) because the data is thrown
// away. Each test process (that is, each package under go test ./...) gets
// its own cluster, so packages can run in parallel. When running as root,
// initdb and pg_ctl are run as the postgres user through runuser, because
// PostgreSQL refuses to run as root.
//
// If neither DATABASE_URL nor a PostgreSQL installation is available, the
// test fails (it is never skipped) with a message explaining how to fix it.
//
// # Cleanup
//
// A package that may start a private cluster should stop it when its tests
// finish, with a TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// If a test process dies without running Main's cleanup (killed, timed out,
// or no TestMain), its cluster keeps running. The next private cluster
// started on the machine finds such clusters (their owning process, recorded
// in a pid file, no longer exists), stops them and removes their directories.
//
// # Usage
//
// Tests normally isolate themselves in a schema of their own and point a
// pool at it through search_path:
//
//	func TestSomething(t *testing.T) {
//		schema := pgtest.Schema(t) // dropped (CASCADE) when the test ends
//		cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
//		if err != nil {
//			t.Fatal(err)
//		}
//		cfg.ConnConfig.RuntimeParams["search_path"] = schema
//		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(pool.Close)
//		// ... create tables and run the code under test ...
//	}
//
// [Pool] is the shortcut when the default search_path is enough, for
// example when queries qualify table names with the schema.
//
// # Connection poolers
//
// [Pgbouncer] starts a real pgbouncer in front of the test database, on a
// free port and with a configuration of its own, for tests of what works
// through a pooler in transaction mode:
//
//	url := pgtest.Pgbouncer(t, pgtest.URL(t), "transaction") + "&default_query_exec_mode=exec"
//
// A machine without pgbouncer fails such tests, saying how to install it
// (apt-get install -y pgbouncer).
//
// # Replication
//
// [Replicate] (or [StartReplicated], without a testing.TB) starts a private
// primary and one hot standby made from it with pg_basebackup and streaming
// from it, for tests of failover, whatever DATABASE_URL says. The primary
// commits durably (synchronous_commit on); with sync, a commit is
// acknowledged only once the standby has flushed it, and without, the
// standby follows asynchronously. Both servers listen on unix sockets in
// folders of their own under one parent folder, which is reaped like a
// private cluster's when its test process dies.
//
// A failover is [Replicated.StopPrimary] then [Replicated.Promote]. A client
// that opens its connections with [Replicated.URL], which names both servers
// with target_session_attrs=read-write, reaches the primary before and the
// promoted standby after:
//
//	rep := pgtest.Replicate(t, true)
//	// ... commit through rep.URL() ...
//	if err := rep.StopPrimary("immediate"); err != nil {
//		t.Fatal(err)
//	}
//	if err := rep.Promote(); err != nil {
//		t.Fatal(err)
//	}
//	// ... new connections on rep.URL() write to the promoted standby,
//	// where every commit acknowledged before the stop is.
//
// An asynchronous failover loses commits, and a test produces the loss at a
// point of its choosing: on a pair started without sync,
// [Replicated.CutReplication] stops the standby receiving WAL, so that what
// the primary commits after it is gone once the standby is promoted.
// [Replicated.WaitCaughtUp] waits until the standby has replayed everything
// the primary has flushed, for a test that needs both servers to agree
// first.
package pgtest
