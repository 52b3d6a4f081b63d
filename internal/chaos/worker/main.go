// Command worker is the Tenure worker process the chaos tests and the chaos
// command start, kill, freeze and restart. It executes the workload's Plan
// workflow (package workload) with short lease timings.
//
// The database comes from the DATABASE_URL environment variable (kept out of
// the command line, where ps would show a password). Logs (slog, JSON) go to
// stderr; stdout carries JSON lines for the controlling process:
//
//	{"event":"started","label":...,"pid":...,"clock":...}   clock: its time.Now()
//	{"event":"stats","label":...,"pid":...,"stats":{...}}   on SIGUSR1
//	{"event":"exit","label":...,"pid":...,"stats":{...}}    when the worker has stopped
//
// SIGTERM or SIGINT shuts the worker down gracefully (runtime.Worker.Shutdown
// with the -drain timeout): attempts still running after the drain are
// recorded interrupted and their runs handed back.
//
// -clock-skew moves the process's wall clock: every time.Now of the process
// returns the real time plus the skew (linux/amd64 only; see
// clockskew_linux_amd64.go), as on a machine whose clock is off. The
// "started" line's clock shows it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/chaos/workload"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

func main() {
	var (
		schema      = flag.String("schema", "tenure", "schema of Tenure's and the ledger's tables")
		label       = flag.String("label", "", "worker label (default host-pid-random)")
		concurrency = flag.Int("concurrency", 8, "runs executed at once")
		lease       = flag.Duration("lease", time.Second, "lease TTL")
		heartbeat   = flag.Duration("heartbeat", 250*time.Millisecond, "heartbeat interval")
		poll        = flag.Duration("poll", 50*time.Millisecond, "poll interval")
		drain       = flag.Duration("drain", time.Second, "drain time on SIGTERM before running attempts are interrupted")
		every       = flag.String("schedule", "", "declare the schedule chaos-schedule of an empty Plan with this spec (\"\": none)")
		skew        = flag.Duration("clock-skew", 0, "move the process's wall clock (time.Now) by this much, e.g. 1h or -1h (linux/amd64)")
	)
	flag.Parse()
	// First: no goroutine of ours may run time.Now while it is patched.
	if err := skewClock(*skew); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	if err := run(*schema, *label, *concurrency, *lease, *heartbeat, *poll, *drain, *every); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// event is one JSON line on stdout.
type event struct {
	Event string         `json:"event"`
	Label string         `json:"label"`
	PID   int            `json:"pid"`
	Stats *runtime.Stats `json:"stats,omitempty"`
	// Clock is the worker's time.Now() when it printed a started line: the
	// real time plus its -clock-skew.
	Clock *time.Time `json:"clock,omitempty"`
}

func run(schema, label string, concurrency int, lease, heartbeat, poll, drain time.Duration, every string) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return fmt.Errorf("DATABASE_URL is not set")
	}
	ctx := context.Background()
	pool, err := newPool(ctx, url, int32(concurrency)+3)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The ledger writes through connections of its own, as a remote system would.
	ledgerPool, err := newPool(ctx, url, int32(max(concurrency/2, 2)))
	if err != nil {
		return err
	}
	defer ledgerPool.Close()

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	w, err := runtime.NewWorker(pool, runtime.Config{
		Schema: schema, Label: label, Concurrency: concurrency,
		LeaseTTL: lease, HeartbeatInterval: heartbeat, PollInterval: poll,
		Logger: logger,
	})
	if err != nil {
		return err
	}
	plan := workload.New(workload.NewLedger(ledgerPool, schema)).Plan
	if err := w.Register(plan); err != nil {
		return err
	}
	if every != "" {
		if err := w.RegisterSchedules(sdk.NewSchedule("chaos-schedule", plan, every, workload.Plan{})); err != nil {
			return err
		}
	}

	var outMu sync.Mutex
	emit := func(name string, withStats bool) {
		e := event{Event: name, Label: w.Label(), PID: os.Getpid()}
		if name == "started" {
			now := time.Now()
			e.Clock = &now
		}
		if withStats {
			s := w.Stats()
			e.Stats = &s
		}
		b, _ := json.Marshal(e)
		outMu.Lock()
		defer outMu.Unlock()
		_, _ = os.Stdout.Write(append(b, '\n'))
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	defer signal.Stop(sigs)

	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	emit("started", false)
	for {
		select {
		case err := <-done:
			emit("exit", true)
			return err
		case s := <-sigs:
			if s == syscall.SIGUSR1 {
				emit("stats", true)
				continue
			}
			logger.Info("worker: shutting down", "signal", s.String(), "drain", drain)
			go func() {
				sctx, cancel := context.WithTimeout(ctx, drain)
				defer cancel()
				_ = w.Shutdown(sctx) // Run returns on done
			}()
		}
	}
}

func newPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, cfg)
}
