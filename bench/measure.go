package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Go supports (sysconf(_SC_CLK_TCK)).
const clockTicks = 100

// meter reads the cluster-wide counters a workload is charged with. It has a
// connection of its own, outside every system's pool; its queries assign no
// transaction ID and write no WAL.
type meter struct {
	conn  *pgx.Conn
	watch *pgx.Conn // watches for other sessions during a timed part
	seen  chan int  // what the watcher saw, when it stops
	quit  chan struct{}
}

// appName marks every connection the benchmark opens, so that the watcher
// can tell other sessions apart.
const appName = "tenure-bench"

// reading is the counters at one instant.
type reading struct {
	at   time.Time
	xid  uint64 // next transaction ID to be assigned
	wal  int64  // bytes of WAL since 0/0
	busy int64  // non-idle jiffies, summed over all CPUs
	own  int64  // this process's CPU time (user and system), in µs
	// foreign is how many of the watcher's samples (one per 100ms) found a
	// session of someone else's active: their transactions and WAL are in
	// the deltas too.
	foreign int
}

func newMeter(ctx context.Context, url string) (*meter, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = appName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	watch, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	return &meter{conn: conn, watch: watch}, nil
}

func (m *meter) close() {
	_ = m.conn.Close(context.Background())
	_ = m.watch.Close(context.Background())
}

// start reads the counters at the start of a timed part and starts watching
// for other sessions.
func (m *meter) start(ctx context.Context) (reading, error) {
	r, err := m.read(ctx)
	if err != nil {
		return r, err
	}
	m.seen, m.quit = make(chan int, 1), make(chan struct{})
	go func(seen chan<- int, quit <-chan struct{}) {
		n := 0
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				seen <- n
				return
			case <-tick.C:
			}
			var others int
			err := m.watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE backend_type = 'client backend' AND state <> 'idle'
				AND application_name NOT LIKE $1 || '%' AND pid <> pg_backend_pid()`, appName).Scan(&others)
			if err == nil && others > 0 {
				n++
			}
		}
	}(m.seen, m.quit)
	return r, nil
}

// stop ends the watch and reads the counters at the end of a timed part.
func (m *meter) stop(ctx context.Context) (reading, error) {
	if m.quit != nil {
		close(m.quit)
		defer func() { m.quit = nil }()
	}
	r, err := m.read(ctx)
	if m.quit != nil {
		r.foreign = <-m.seen
	}
	return r, err
}

// settle checkpoints, so that every timed part starts with the same
// full-page-write state (the first change to a page after a checkpoint logs
// the whole page).
func (m *meter) settle(ctx context.Context) error {
	_, err := m.conn.Exec(ctx, `CHECKPOINT`)
	return err
}

func (m *meter) read(ctx context.Context) (reading, error) {
	var r reading
	var xid string
	if err := m.conn.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text,
		pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&xid, &r.wal); err != nil {
		return r, fmt.Errorf("read counters: %w", err)
	}
	var err error
	if r.xid, err = strconv.ParseUint(xid, 10, 64); err != nil {
		return r, fmt.Errorf("read counters: xid %q: %w", xid, err)
	}
	if r.busy, err = busyJiffies(); err != nil {
		return r, err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return r, fmt.Errorf("own CPU: %w", err)
	}
	r.own = ru.Utime.Nano()/1000 + ru.Stime.Nano()/1000
	r.at = time.Now()
	return r, nil
}

// busyJiffies sums the non-idle time of the machine's first /proc/stat line:
// user, nice, system, irq, softirq and steal (guest time is already part of
// user); idle and iowait are left out.
func busyJiffies() (int64, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("machine CPU: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("machine CPU: %w", err)
	}
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("machine CPU: unexpected /proc/stat line %q", line)
	}
	var busy int64
	for i, f := range fields[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("machine CPU: %w", err)
		}
		busy += n
	}
	return busy, nil
}

// measure runs fn as a workload's timed part: it checkpoints first, reads
// the counters around fn (the watch stops whatever fn returns), and charges
// res with their deltas and with the percentiles of the latencies fn returns
// (none for a workload without per-run latency).
func (m *meter) measure(ctx context.Context, res *result, fn func() ([]time.Duration, error)) error {
	if err := m.settle(ctx); err != nil {
		return err
	}
	before, err := m.start(ctx)
	if err != nil {
		return err
	}
	d, err := fn()
	after, serr := m.stop(ctx)
	if err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	charge(res, before, after)
	latencies(res, d)
	return nil
}

// charge fills res's per-run costs from the readings around its timed part.
func charge(res *result, before, after reading) {
	res.Seconds = after.at.Sub(before.at).Seconds()
	res.ForeignSamples = after.foreign
	n := float64(res.Runs)
	res.RunsPerSec = n / res.Seconds
	if res.Steps > 0 {
		res.StepsPerSec = float64(res.Runs*res.Steps) / res.Seconds
	}
	res.XactsPerRun = float64(after.xid-before.xid) / n
	res.WALBytesPerRun = float64(after.wal-before.wal) / n
	res.WALFrom, res.WALTo = lsn(before.wal), lsn(after.wal)
	res.CPUMsPerRun = float64(after.busy-before.busy) * 1000 / clockTicks / n
	res.OwnCPUMsPerRun = float64(after.own-before.own) / 1000 / n
}

// lsn is a WAL position as PostgreSQL writes it (0/16B3748).
func lsn(bytes int64) string {
	return fmt.Sprintf("%X/%X", uint64(bytes)>>32, uint64(bytes)&0xFFFFFFFF)
}

// latencies fills res's percentiles, in milliseconds.
func latencies(res *result, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(p float64) float64 {
		i := int(p*float64(len(d))+0.5) - 1
		i = max(0, min(i, len(d)-1))
		return float64(d[i].Microseconds()) / 1000
	}
	p50, p90 := at(0.50), at(0.90)
	res.P50Ms, res.P90Ms = &p50, &p90
}
