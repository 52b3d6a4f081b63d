package pgtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestPoolAndSchema runs against DATABASE_URL when it is set, and against
// this process's private cluster otherwise.
func TestPoolAndSchema(t *testing.T) {
	ctx := context.Background()
	pool := Pool(t)
	var db string
	if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if env := os.Getenv(EnvVar); env != "" {
		t.Logf("using %s (database %q)", EnvVar, db)
	} else {
		t.Logf("using private cluster %s (started in %v)", URL(t), shared.startup.Round(time.Millisecond))
	}

	var schema string
	t.Run("schema", func(t *testing.T) {
		schema = Schema(t)
		if !strings.HasPrefix(schema, "t_") {
			t.Fatalf("schema %q lacks the t_ prefix", schema)
		}
		if other := Schema(t); other == schema {
			t.Fatalf("two schemas named %q", schema)
		}
		if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".kv (k text PRIMARY KEY, v int)"); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "INSERT INTO "+schema+".kv VALUES ('a', 1)"); err != nil {
			t.Fatal(err)
		}
		var v int
		if err := pool.QueryRow(ctx, "SELECT v FROM "+schema+".kv WHERE k = 'a'").Scan(&v); err != nil || v != 1 {
			t.Fatalf("got %d, %v; want 1, nil", v, err)
		}
	})
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatalf("schema %s still exists after its test finished", schema)
	}
}

func TestURLPrefersDatabaseURL(t *testing.T) {
	const want = "postgres://someone@db.invalid:5432/x?sslmode=disable"
	t.Setenv(EnvVar, want)
	if got := URL(t); got != want {
		t.Fatalf("URL = %q, want %q", got, want)
	}
}

func TestNoPostgresMessage(t *testing.T) {
	t.Setenv("PATH", "")
	_, err := newRunner(filepath.Join(t.TempDir(), "*", "bin"))
	if err == nil {
		t.Fatal("found PostgreSQL with an empty PATH and no fallback folder")
	}
	for _, want := range []string{"DATABASE_URL", "install"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// newTestCluster starts a private cluster whatever DATABASE_URL says.
func newTestCluster(t *testing.T) (*runner, *cluster) {
	t.Helper()
	r, err := newRunner(fallbackGlob)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := r.newClusterDir(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c, err := r.startCluster(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Logf("cluster started in %v (bin %s, runuser %q)", time.Since(start).Round(time.Millisecond), r.binDir, r.runuser)
	t.Cleanup(func() {
		if _, err := os.Stat(dir); err == nil {
			if err := c.destroy(); err != nil {
				t.Error(err)
			}
		}
	})
	return r, c
}

func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.Connect(ctx, url)
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c := newTestCluster(t)
	conn, err := connect(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	for name, want := range map[string]string{
		"listen_addresses": "", "fsync": "off", "synchronous_commit": "off",
		"full_page_writes": "off", "max_connections": "200", "server_encoding": "UTF8",
		"lc_collate": "C", "port": strconv.Itoa(port),
	} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if os.Geteuid() == 0 {
		fi, err := os.Stat(c.data)
		if err != nil {
			t.Fatal(err)
		}
		if owner := fileOwner(fi); owner != "" && owner != "postgres" {
			t.Errorf("data directory owned by %s, want postgres", owner)
		}
	}
}

func TestReapOrphans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, c := newTestCluster(t)

	// A finished process's pid stands in for a killed test process.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	writeOwner := func(dir string, pid int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, pidFileName), []byte(strconv.Itoa(pid)+"\n"+host+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeOwner(c.dir, dead.Process.Pid)

	// A folder whose owner is alive must be left alone.
	live, err := r.newClusterDir(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	writeOwner(live, os.Getppid())

	reaped := r.reapOrphans(os.TempDir())
	t.Logf("reaped %v", reaped)
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("orphan %s still there (stat: %v)", c.dir, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("folder of a live process was removed: %v", err)
	}
	if conn, err := connect(ctx, c.url); err == nil {
		conn.Close(ctx)
		t.Error("orphan server still accepts connections")
	}
}

// Through a transaction-mode pgbouncer, many clients share the few server
// connections of its pool, and the pgbouncer is gone after its test.
func TestPgbouncer_TransactionModeSharesServerConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var through string
	t.Run("through", func(t *testing.T) {
		through = Pgbouncer(t, URL(t), "transaction")
		cfg, err := pgx.ParseConfig(through + "&default_query_exec_mode=exec")
		if err != nil {
			t.Fatal(err)
		}
		const clients = 8
		pids := make(chan int, clients)
		errs := make(chan error, clients)
		for range clients {
			go func() {
				conn, err := pgx.ConnectConfig(ctx, cfg)
				if err != nil {
					errs <- err
					return
				}
				defer conn.Close(ctx)
				var pid int
				err = conn.QueryRow(ctx, "SELECT pg_backend_pid() FROM pg_sleep(0.2)").Scan(&pid)
				pids <- pid
				errs <- err
			}()
		}
		seen := map[int]bool{}
		for range clients {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		close(pids)
		for pid := range pids {
			seen[pid] = true
		}
		if len(seen) > PgbouncerPoolSize {
			t.Fatalf("%d clients used %d server connections; want at most %d", clients, len(seen), PgbouncerPoolSize)
		}
	})
	if conn, err := connect(ctx, through); err == nil {
		conn.Close(ctx)
		t.Error("pgbouncer still accepts connections after its test")
	}
}
