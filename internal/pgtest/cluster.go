package pgtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// dirPrefix starts the name of every cluster folder under os.TempDir.
	dirPrefix = "pgtest-"
	// pidFileName holds "<owner pid>\n<hostname>\n" of the test process that
	// owns a cluster folder.
	pidFileName = "owner.pid"
	// port is fixed: the socket lives in a folder unique to the cluster.
	port = 5432
	// fallbackGlob is searched when initdb and pg_ctl are not on PATH.
	fallbackGlob = "/usr/lib/postgresql/*/bin"
	// maxSocketPath is the longest unix socket path PostgreSQL accepts.
	maxSocketPath = 107
)

// fixHint ends every "no database" error.
const fixHint = "to fix: set DATABASE_URL to a reachable server " +
	"(e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable), " +
	"or install the PostgreSQL server (initdb, pg_ctl, postgres on PATH or under " +
	fallbackGlob + "; e.g. apt-get install postgresql, brew install postgresql)"

// serverConf is appended to postgresql.conf; the socket settings follow.
// Durability is off: the cluster is thrown away.
var serverConf = []string{
	"listen_addresses = ''",
	"fsync = off",
	"synchronous_commit = off",
	"full_page_writes = off",
	"max_connections = 200",
}

// runner runs the PostgreSQL programs, as the postgres user through runuser
// when this process is root.
type runner struct {
	binDir   string // holds initdb, pg_ctl and postgres
	runuser  string // path of runuser, or "" to run programs directly
	user     string // user to run as with runuser
	uid, gid int    // owner to give new folders, or -1 to keep ours
}

// cluster is a private PostgreSQL cluster living in one folder.
type cluster struct {
	r       *runner
	dir     string // the cluster folder, holding everything below
	data    string // data directory
	sock    string // unix socket directory
	log     string // server log
	url     string // connection string
	startup time.Duration
}

// startPrivate starts this process's private cluster, after cleaning up
// clusters left behind by dead test processes.
func startPrivate() (*cluster, error) {
	r, err := newRunner(fallbackGlob)
	if err != nil {
		return nil, err
	}
	tmp := os.TempDir()
	r.reapOrphans(tmp)
	dir, err := r.newClusterDir(tmp)
	if err != nil {
		return nil, err
	}
	c, err := r.startCluster(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting a private cluster failed (set DATABASE_URL to avoid it): %w", err)
	}
	return c, nil
}

// newRunner finds the PostgreSQL programs and, when running as root, the
// postgres user and runuser.
func newRunner(glob string) (*runner, error) {
	bin, err := findBinDir(glob)
	if err != nil {
		return nil, err
	}
	r := &runner{binDir: bin, uid: -1, gid: -1}
	if os.Geteuid() != 0 {
		return r, nil
	}
	r.user, r.uid, r.gid, r.runuser, err = postgresUser("PostgreSQL")
	if err != nil {
		return nil, fmt.Errorf("%w; or set DATABASE_URL", err)
	}
	return r, nil
}

// postgresUser returns the postgres user and the runuser program that runs
// prog (which refuses to run as root) as that user, for a root process.
func postgresUser(prog string) (name string, uid, gid int, runuser string, err error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return "", 0, 0, "", fmt.Errorf("running as root, and %s refuses to run as root, "+
			"but there is no postgres user to run it as (%v); create one (useradd --system postgres)", prog, err)
	}
	if uid, err = strconv.Atoi(u.Uid); err != nil {
		return "", 0, 0, "", fmt.Errorf("postgres user: uid %q: %v", u.Uid, err)
	}
	if gid, err = strconv.Atoi(u.Gid); err != nil {
		return "", 0, 0, "", fmt.Errorf("postgres user: gid %q: %v", u.Gid, err)
	}
	runuser, err = exec.LookPath("runuser")
	if err != nil {
		for _, p := range []string{"/usr/sbin/runuser", "/sbin/runuser"} {
			if isExecutable(p) {
				runuser, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return "", 0, 0, "", fmt.Errorf("running as root, so %s must run as the postgres user, "+
			"but runuser (util-linux) was not found; install it, or run the tests as a non-root user", prog)
	}
	return u.Username, uid, gid, runuser, nil
}

// findBinDir returns a folder holding initdb, pg_ctl and postgres: the one
// of initdb on PATH (symlinks resolved), else the newest version matching
// glob.
func findBinDir(glob string) (string, error) {
	var candidates []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
		candidates = append(candidates, filepath.Dir(p))
	}
	matches, _ := filepath.Glob(glob)
	version := func(binDir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
		return v
	}
	sort.SliceStable(matches, func(i, j int) bool { return version(matches[i]) > version(matches[j]) })
	candidates = append(candidates, matches...)
	for _, dir := range candidates {
		if isExecutable(filepath.Join(dir, "initdb")) &&
			isExecutable(filepath.Join(dir, "pg_ctl")) &&
			isExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("DATABASE_URL is not set and no PostgreSQL server programs were found " +
		"to start a private cluster; " + fixHint)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// newClusterDir creates a new cluster folder under tmp, records this
// process as its owner, and gives it to the user the server runs as.
func (r *runner) newClusterDir(tmp string) (string, error) {
	dir, err := os.MkdirTemp(tmp, fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("create cluster folder: %w", err)
	}
	host, _ := os.Hostname()
	owner := fmt.Sprintf("%d\n%s\n", os.Getpid(), host)
	if err := os.WriteFile(filepath.Join(dir, pidFileName), []byte(owner), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("write pid file: %w", err)
	}
	if err := r.give(dir); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// give hands a folder we created to the server's user, readable by all so
// that we can reach the socket in it.
func (r *runner) give(dir string) error {
	if r.uid < 0 {
		return nil
	}
	if err := os.Chown(dir, r.uid, r.gid); err != nil {
		return fmt.Errorf("chown %s to %s: %w", dir, r.user, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	return nil
}

// startCluster initialises a cluster in dir (made by newClusterDir) and
// starts its server, waiting until it accepts connections. The settings in
// conf follow serverConf in postgresql.conf, so they override it. On failure
// the caller removes dir.
func (r *runner) startCluster(dir string, conf ...string) (*cluster, error) {
	c := &cluster{
		r:    r,
		dir:  dir,
		data: filepath.Join(dir, "data"),
		sock: filepath.Join(dir, "sock"),
		log:  filepath.Join(dir, "postgres.log"),
	}
	if n := len(c.sock) + len("/.s.PGSQL.") + len(strconv.Itoa(port)); n > maxSocketPath {
		return nil, fmt.Errorf("socket path under %s is %d bytes, over PostgreSQL's limit of %d; "+
			"set TMPDIR to a shorter folder, or set DATABASE_URL", dir, n, maxSocketPath)
	}
	if err := os.Mkdir(c.sock, 0o755); err != nil {
		return nil, fmt.Errorf("create socket folder: %w", err)
	}
	if err := r.give(c.sock); err != nil {
		return nil, err
	}
	if err := r.run(dir, 2*time.Minute, "initdb", "-D", c.data, "-U", "postgres", "--auth=trust",
		"--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		return nil, err
	}
	conf = append(slices.Concat(serverConf, conf),
		"port = "+strconv.Itoa(port),
		"unix_socket_directories = "+quoteConf(c.sock),
	)
	if err := appendFile(filepath.Join(c.data, "postgresql.conf"), "\n# pgtest\n"+strings.Join(conf, "\n")+"\n"); err != nil {
		return nil, err
	}
	if err := r.run(dir, 2*time.Minute, "pg_ctl", "start", "-D", c.data, "-l", c.log, "-w", "-t", "90", "-s"); err != nil {
		log, _ := os.ReadFile(c.log)
		_ = c.stop()
		return nil, fmt.Errorf("%w\nserver log:\n%s", err, tail(string(log), 2000))
	}
	c.url = "postgres://postgres@/postgres?host=" + url.QueryEscape(c.sock) + "&sslmode=disable"
	return c, nil
}

// stop shuts the server down immediately (the data is thrown away anyway).
func (c *cluster) stop() error {
	return c.r.run(c.dir, time.Minute, "pg_ctl", "stop", "-D", c.data, "-m", "immediate", "-w", "-s")
}

// destroy stops the server and removes the cluster folder.
func (c *cluster) destroy() error {
	if err := c.stop(); err != nil && serverRunning(c.data) {
		return fmt.Errorf("%w (folder %s kept)", err, c.dir)
	}
	return os.RemoveAll(c.dir)
}

// reapOrphans stops and removes clusters under tmp whose owning test process
// is gone. It only touches folders named like ours whose pid file names a
// dead process on this host, and keeps any whose server it cannot stop.
// It returns the folders removed.
func (r *runner) reapOrphans(tmp string) []string {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil
	}
	host, _ := os.Hostname()
	var reaped []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, pidFileName))
		if err != nil {
			continue // not ours, or being created
		}
		fields := strings.Split(string(b), "\n")
		pid, err := strconv.Atoi(strings.TrimSpace(fields[0]))
		if err != nil || pid <= 0 || pid == os.Getpid() || processAlive(pid) ||
			len(fields) < 2 || strings.TrimSpace(fields[1]) != host {
			continue
		}
		if r.removeFolder(dir) == nil {
			reaped = append(reaped, dir)
		}
	}
	return reaped
}

// removeFolder stops every server whose data directory is in the cluster
// folder dir (dir/data, and dir/*/data such as a replicated pair's standby's)
// and removes the folder. It keeps the folder when one of them is still
// running after the stop.
func (r *runner) removeFolder(dir string) error {
	datas, _ := filepath.Glob(filepath.Join(dir, "*", "data"))
	for _, data := range append([]string{filepath.Join(dir, "data")}, datas...) {
		if _, err := os.Stat(data); err != nil {
			continue
		}
		c := &cluster{r: r, dir: dir, data: data}
		if err := c.stop(); err != nil && serverRunning(data) {
			return fmt.Errorf("%w (folder %s kept)", err, dir)
		}
	}
	return os.RemoveAll(dir)
}

// serverRunning reports whether data has a postmaster.pid naming a live
// process. When it cannot tell, it says yes, so that nothing is removed.
func serverRunning(data string) bool {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) // unreadable: assume running
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	return err != nil || processAlive(pid) // unreadable: assume running
}

// processAlive reports whether a process exists. Where it cannot tell, it
// says yes, so that nothing is removed.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	defer func() { _ = p.Release() }()
	return !errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// run runs one of the PostgreSQL programs in dir, returning its output in
// the error when it fails.
func (r *runner) run(dir string, timeout time.Duration, prog string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	path := filepath.Join(r.binDir, prog)
	var cmd *exec.Cmd
	if r.runuser != "" {
		cmd = exec.CommandContext(ctx, r.runuser, append([]string{"-u", r.user, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	cmd.WaitDelay = 5 * time.Second // never hang on a pipe a server inherited
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", prog, strings.Join(args, " "), err, tail(string(out), 2000))
	}
	return nil
}

// cleanEnv is our environment without the PG* variables, which could point
// the programs elsewhere.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// quoteConf quotes a string value of postgresql.conf.
func quoteConf(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
