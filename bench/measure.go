package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
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
	conn *pgx.Conn
}

// reading is the counters at one instant.
type reading struct {
	at   time.Time
	xid  uint64 // next transaction ID to be assigned
	wal  int64  // bytes of WAL since 0/0
	busy int64  // non-idle jiffies, summed over all CPUs
}

func newMeter(ctx context.Context, url string) (*meter, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	return &meter{conn: conn}, nil
}

func (m *meter) close() { _ = m.conn.Close(context.Background()) }

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

// charge fills res's per-run costs from the readings around its timed part.
func charge(res *result, before, after reading) {
	res.Seconds = after.at.Sub(before.at).Seconds()
	n := float64(res.Runs)
	res.RunsPerSec = n / res.Seconds
	if res.Steps > 0 {
		res.StepsPerSec = float64(res.Runs*res.Steps) / res.Seconds
	}
	res.XactsPerRun = float64(after.xid-before.xid) / n
	res.WALBytesPerRun = float64(after.wal-before.wal) / n
	res.CPUMsPerRun = float64(after.busy-before.busy) * 1000 / clockTicks / n
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
