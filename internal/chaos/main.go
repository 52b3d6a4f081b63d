// Command chaos checks Tenure's failure semantics under fire: it runs K
// worker processes (internal/chaos/worker) on a workload of N runs mixing
// at-least-once, at-most-once, transactional, flaky, limited (one
// downstream's concurrency limit and rate) and poison-pill activities with
// durable sleeps and signal receipts (internal/chaos/workload;
// it sends the signals itself), kills workers (SIGKILL) and freezes
// them past their lease (SIGSTOP, then SIGCONT) at random intervals for the
// given duration (or until every run has ended), restarts the dead ones,
// waits for every run to end, then checks the invariants
// (internal/chaos/invariant) and prints a summary. It exits 1 when an
// invariant is violated or a worker crashed, 2 when the check could not be
// made.
//
//	go run ./internal/chaos -runs 2000 -workers 4 -duration 2m
//
// The database is DATABASE_URL when set; otherwise a private throwaway
// cluster is started (see internal/pgtest). The tables go to a new schema
// named chaos_<time>, dropped at the end unless -keep is given. The worker
// program is built with `go build`, so run the command from inside the module.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/chaos/fleet"
	"github.com/tenurehq/tenure/internal/pgtest"
)

func main() {
	cfg := config{Progress: os.Stderr}
	flag.IntVar(&cfg.Runs, "runs", 200, "runs to start")
	flag.IntVar(&cfg.Workers, "workers", 3, "worker processes")
	flag.IntVar(&cfg.Concurrency, "concurrency", 8, "runs per worker at once")
	flag.DurationVar(&cfg.Duration, "duration", 30*time.Second, "chaos window: runs are started over its first 60%; it ends early once every run has ended")
	flag.DurationVar(&cfg.Settle, "settle", time.Minute, "how long runs may take to end after the chaos window")
	flag.DurationVar(&cfg.Interval, "interval", time.Second, "mean time between two disruptions")
	flag.DurationVar(&cfg.LeaseTTL, "lease", time.Second, "workers' lease TTL")
	flag.DurationVar(&cfg.Heartbeat, "heartbeat", 250*time.Millisecond, "workers' heartbeat interval")
	flag.DurationVar(&cfg.Poll, "poll", 50*time.Millisecond, "workers' poll interval")
	flag.IntVar(&cfg.PoisonEvery, "poison", 50, "one run in this many has a poison-pill step (0: none)")
	flag.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "random seed (plans and disruptions)")
	flag.StringVar(&cfg.Schema, "schema", fmt.Sprintf("chaos_%d", time.Now().Unix()), "schema for the run's tables (created)")
	keep := flag.Bool("keep", false, "keep the schema for inspection")
	flag.Parse()
	ok, err := run(cfg, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(cfg config, keep bool) (bool, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.URL = os.Getenv(pgtest.EnvVar)
	if cfg.URL == "" {
		url, stopCluster, err := pgtest.Start()
		if err != nil {
			return false, err
		}
		defer func() { _ = stopCluster() }()
		cfg.URL = url
		keep = false // the cluster goes away anyway
	}
	dir, err := os.MkdirTemp("", "tenure-chaos-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	if cfg.Binary, err = fleet.Build(ctx, dir); err != nil {
		return false, err
	}
	if !keep {
		defer dropSchema(cfg.URL, cfg.Schema)
	}
	sum, err := runChaos(ctx, cfg)
	if err != nil {
		return false, err
	}
	sum.write(os.Stdout)
	if keep {
		fmt.Printf("schema %s kept\n", cfg.Schema)
	}
	return sum.ok(), nil
}

func dropSchema(url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: drop schema:", err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: drop schema:", err)
	}
}
