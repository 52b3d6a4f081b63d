package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PgbouncerPoolSize is the default_pool_size of the pgbouncers that
// [Pgbouncer] starts: so few server connections per database and user that
// clients really share them, as behind a hosted pooler under load.
const PgbouncerPoolSize = 3

// pgbouncerFix ends every error about a missing or broken pgbouncer.
const pgbouncerFix = "to fix: install pgbouncer (Debian/Ubuntu: apt-get install -y pgbouncer; " +
	"macOS: brew install pgbouncer) so that it is on PATH or in /usr/sbin"

// Pgbouncer starts a real pgbouncer in front of upstream (a connection
// string, typically [URL]) with the given pool_mode ("transaction",
// "session" or "statement") and returns a URL that reaches upstream's
// database through it: postgres://<user>@127.0.0.1:<port>/<db>?sslmode=disable,
// to which callers append settings such as &default_query_exec_mode=exec.
//
// The pgbouncer listens on a free port of 127.0.0.1, trusts its clients, logs
// in upstream as upstream's user (with upstream's password, if any) and keeps
// at most [PgbouncerPoolSize] server connections, or the number
// [WithPoolSize] sets. Upstream's user is an admin of its console (database
// pgbouncer, simple protocol only: SHOW POOLS). Its configuration and log
// live in a folder of its own; it is stopped and the folder removed when the
// test ends. When this process is root, pgbouncer (which refuses to run as
// root) runs as the postgres user through runuser.
//
// A missing pgbouncer, or one that does not start or cannot reach upstream,
// fails the test with a message saying how to fix it; it never skips.
func Pgbouncer(t testing.TB, upstream, mode string, opts ...PgbouncerOption) string {
	t.Helper()
	url, stop, err := StartPgbouncer(upstream, mode, opts...)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(stop)
	return url
}

// PgbouncerOption changes a setting of the pgbouncer that [Pgbouncer] or
// [StartPgbouncer] starts.
type PgbouncerOption func(*pgbouncerSettings)

// pgbouncerSettings are what the options set.
type pgbouncerSettings struct {
	poolSize int // default_pool_size
}

// WithPoolSize sets the pgbouncer's default_pool_size, the server
// connections it keeps per database and user, to n (default
// [PgbouncerPoolSize]): a test of what a pool of that size serves, such as
// one sized for session mode, where each client connection holds a server
// connection for as long as it is open.
func WithPoolSize(n int) PgbouncerOption {
	return func(s *pgbouncerSettings) { s.poolSize = n }
}

// StartPgbouncer is Pgbouncer for code without a testing.TB, such as
// Example functions: it returns the URL through the pgbouncer and a function
// that stops it, or an error saying how to fix the machine.
func StartPgbouncer(upstream, mode string, opts ...PgbouncerOption) (url string, stop func(), err error) {
	switch mode {
	case "transaction", "session", "statement":
	default:
		return "", nil, fmt.Errorf("pgbouncer pool_mode %q: want transaction, session or statement", mode)
	}
	set := pgbouncerSettings{poolSize: PgbouncerPoolSize}
	for _, opt := range opts {
		opt(&set)
	}
	if set.poolSize < 1 {
		return "", nil, fmt.Errorf("pgbouncer default_pool_size %d: want at least 1", set.poolSize)
	}
	bin, err := findPgbouncer()
	if err != nil {
		return "", nil, err
	}
	up, err := pgconn.ParseConfig(upstream)
	if err != nil {
		return "", nil, fmt.Errorf("pgbouncer upstream: %w", err)
	}
	for range 3 { // the free port may be taken before pgbouncer binds it
		var b *pgbouncer
		if b, err = startPgbouncer(bin, up, mode, set); err == nil {
			return b.url, b.stop, nil
		}
	}
	return "", nil, fmt.Errorf("start pgbouncer: %w", err)
}

// findPgbouncer returns the path of the pgbouncer program. Debian installs
// it in /usr/sbin, which a non-root PATH often lacks.
func findPgbouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer", "/opt/homebrew/bin/pgbouncer"} {
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", errors.New("pgbouncer not found, and the connection-pooler tests need a real one; " + pgbouncerFix)
}

// pgbouncer is one running pgbouncer process.
type pgbouncer struct {
	cmd  *exec.Cmd
	dir  string
	log  string
	url  string
	done chan struct{} // closed when the process has exited
}

// startPgbouncer writes a configuration for up in a new folder, starts
// pgbouncer on a free port and waits until a query through it succeeds.
func startPgbouncer(bin string, up *pgconn.Config, mode string, set pgbouncerSettings) (*pgbouncer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("create pgbouncer folder: %w", err)
	}
	b := &pgbouncer{dir: dir, log: filepath.Join(dir, "pgbouncer.log"), done: make(chan struct{})}
	fail := func(err error) (*pgbouncer, error) {
		b.stop()
		return nil, err
	}
	if err := b.writeConfig(up, mode, port, set); err != nil {
		return fail(err)
	}
	out, err := b.start(bin)
	if err != nil {
		return fail(err)
	}
	u := url.URL{Scheme: "postgres", User: url.User(up.User), Host: "127.0.0.1:" + strconv.Itoa(port),
		Path: "/" + up.Database, RawQuery: "sslmode=disable"}
	b.url = u.String()
	if err := b.awaitQuery(port, out); err != nil {
		return fail(err)
	}
	return b, nil
}

// writeConfig writes pgbouncer.ini and userlist.txt in b's folder: every
// database of up, pooled in mode, served on port with trust.
func (b *pgbouncer) writeConfig(up *pgconn.Config, mode string, port int, set pgbouncerSettings) error {
	server := "host=" + quoteConnValue(up.Host) + " port=" + strconv.Itoa(int(up.Port))
	if up.Password != "" {
		server += " password=" + quoteConnValue(up.Password)
	}
	ini := strings.Join([]string{
		"[databases]",
		"* = " + server,
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(port),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + filepath.Join(b.dir, "userlist.txt"),
		"pool_mode = " + mode,
		"default_pool_size = " + strconv.Itoa(set.poolSize),
		"max_client_conn = 1000",
		"ignore_startup_parameters = extra_float_digits",
		"logfile = " + b.log,
		"pidfile = " + filepath.Join(b.dir, "pgbouncer.pid"),
		"admin_users = " + up.User,
		"",
	}, "\n")
	users := fmt.Sprintf("%q \"\"\n", up.User)
	if err := os.WriteFile(filepath.Join(b.dir, "pgbouncer.ini"), []byte(ini), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.dir, "userlist.txt"), []byte(users), 0o644)
}

// start starts bin on b's configuration, as the postgres user when run as
// root, and returns what it prints; b.done is closed when it exits.
func (b *pgbouncer) start(bin string) (*strings.Builder, error) {
	args := []string{filepath.Join(b.dir, "pgbouncer.ini")}
	b.cmd = exec.Command(bin, args...)
	if os.Geteuid() == 0 {
		name, uid, gid, runuser, err := postgresUser("pgbouncer")
		if err != nil {
			return nil, err
		}
		for _, p := range []string{b.dir, filepath.Join(b.dir, "pgbouncer.ini"), filepath.Join(b.dir, "userlist.txt")} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, fmt.Errorf("chown %s to %s: %w", p, name, err)
			}
		}
		b.cmd = exec.Command(runuser, append([]string{"-u", name, "--", bin}, args...)...)
	}
	b.cmd.Dir = b.dir
	b.cmd.Env = cleanEnv()
	// Its own process group, so that stop reaches pgbouncer under runuser.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &strings.Builder{}
	b.cmd.Stdout, b.cmd.Stderr = out, out
	b.cmd.WaitDelay = 5 * time.Second
	if err := b.cmd.Start(); err != nil {
		close(b.done)
		return nil, fmt.Errorf("%s: %w; %s", bin, err, pgbouncerFix)
	}
	go func() {
		_ = b.cmd.Wait()
		close(b.done)
	}()
	return out, nil
}

// awaitQuery waits up to 15s until a query through b on port succeeds; out
// is what the process printed, for the error if it exits first.
func (b *pgbouncer) awaitQuery(port int, out *strings.Builder) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		err := b.ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-b.done:
			return fmt.Errorf("pgbouncer exited at start-up: %s\n%s", b.cmd.ProcessState, tail(out.String()+b.readLog(), 2000))
		case <-ctx.Done():
			return fmt.Errorf("no query through pgbouncer on port %d within 15s: %v\n%s", port, err, tail(b.readLog(), 2000))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ping runs a query through the pgbouncer, which reaches upstream.
func (b *pgbouncer) ping(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(b.url)
	if err != nil {
		return err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.ConnectTimeout = time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

// PgbouncerPool is the state of one pool of a pgbouncer, as its console's
// SHOW POOLS reports it: the client connections linked to a server
// connection or waiting for one, and the server connections linked to a
// client (active) or free (idle, used).
type PgbouncerPool struct {
	ClientsActive, ClientsWaiting           int
	ServersActive, ServersIdle, ServersUsed int
}

// ShowPgbouncerPool returns the state of the pool that url (a URL that
// [Pgbouncer] returned) connects to: that of its database and user. It asks
// the pgbouncer's console, as url's user.
func ShowPgbouncerPool(ctx context.Context, url string) (PgbouncerPool, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return PgbouncerPool{}, err
	}
	database, user := cfg.Database, cfg.User
	cfg.Database = "pgbouncer"
	cfg.RuntimeParams = map[string]string{} // the console takes no settings
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return PgbouncerPool{}, fmt.Errorf("pgbouncer console: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SHOW POOLS")
	if err != nil {
		return PgbouncerPool{}, fmt.Errorf("pgbouncer SHOW POOLS: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		col := map[string]string{}
		for i, fd := range rows.FieldDescriptions() {
			col[fd.Name] = string(rows.RawValues()[i])
		}
		if col["database"] != database || col["user"] != user {
			continue
		}
		var p PgbouncerPool
		for _, f := range []struct {
			name string
			n    *int
		}{
			{"cl_active", &p.ClientsActive}, {"cl_waiting", &p.ClientsWaiting},
			{"sv_active", &p.ServersActive}, {"sv_idle", &p.ServersIdle}, {"sv_used", &p.ServersUsed},
		} {
			if *f.n, err = strconv.Atoi(col[f.name]); err != nil {
				return PgbouncerPool{}, fmt.Errorf("pgbouncer SHOW POOLS: column %s: %w", f.name, err)
			}
		}
		rows.Close()
		return p, nil
	}
	if err := rows.Err(); err != nil {
		return PgbouncerPool{}, fmt.Errorf("pgbouncer SHOW POOLS: %w", err)
	}
	return PgbouncerPool{}, fmt.Errorf("pgbouncer SHOW POOLS: no pool of database %q and user %q", database, user)
}

// stop terminates the pgbouncer and removes its folder.
func (b *pgbouncer) stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		// pgbouncer itself first: runuser, sent a signal, waits 2s before
		// it kills its child.
		pid, err := os.ReadFile(filepath.Join(b.dir, "pgbouncer.pid"))
		if n, perr := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil && perr == nil && n > 0 {
			_ = syscall.Kill(n, syscall.SIGTERM)
		} else {
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
		}
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
	}
	_ = os.RemoveAll(b.dir)
}

func (b *pgbouncer) readLog() string {
	log, _ := os.ReadFile(b.log)
	return string(log)
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// quoteConnValue quotes a value of a libpq-style key=value string.
func quoteConnValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}
