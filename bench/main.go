// Command bench measures Tenure against River and DBOS Transact Go on the same
// PostgreSQL server, in one invocation so that the ratios are comparable on a
// shared, noisy machine. Every activity is a no-op, so what is measured is
// each system's own cost: runs per second, and per run the write
// transactions, the WAL bytes and the machine's CPU time (application and
// PostgreSQL together). See README.md for the workloads and each peer's
// settings.
//
// From this folder:
//
//	go run . [-systems tenure,river,dbos] [-workloads A,A',B,C,D] [-scale 1] [-history 0] [-json out.json]
//	go run . -workloads F-conc,F-rate,F-breaker   # flow control, judged against its targets
//
// The counters are cluster-wide: run nothing else against the server.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// config is what one invocation measures, and how.
type config struct {
	url     string
	systems []string
	loads   []string
	prefix  string // schemas are prefix_tenure, prefix_river, prefix_dbos
	history int    // finished runs in each system's tables before each workload (history.go)
	// partitions makes Tenure's steps and attempts this many partitions (partitions.go).
	partitions int

	runsA, runsB, runsC, runsD int // runs per workload (A and A' share runsA)
	stepsB                     int
	callers                    int   // concurrent callers in A and B
	poolSize                   int32 // connections per pool, every system
	dWorkers                   []int // worker processes in D

	tenureConcurrency int // runs a Tenure worker executes at once
	tenureDrain       int // the same, for A' (a drain, like River's MaxWorkers)
	riverWorkers      int // River's MaxWorkers
	riverCooldown     time.Duration
	riverPoll         time.Duration

	lRounds   int        // L: pairs of its variants (none, limit)
	rRounds   int        // R: pairs of its variants (none, adapter)
	hAttempts []int      // H: the sizes of history, in attempts (growth.go)
	lLimit    int        // L: the concurrency limit that never binds
	flow      flowConfig // F-conc, F-rate, F-breaker

	log io.Writer // progress; the table goes to stdout
}

// result is one workload on one system. Costs are per run; latencies in ms.
type result struct {
	Workload string `json:"workload"`
	// Variant tells L's two apart: "none" (no downstream) or "limit".
	Variant        string  `json:"variant,omitempty"`
	System         string  `json:"system"`
	Workers        int     `json:"workers,omitempty"` // worker processes (D)
	Runs           int     `json:"runs"`
	Steps          int     `json:"steps_per_run"`
	Seconds        float64 `json:"seconds"`
	RunsPerSec     float64 `json:"runs_per_s"`
	StepsPerSec    float64 `json:"steps_per_s,omitempty"`
	XactsPerRun    float64 `json:"write_xacts_per_run"`
	WALBytesPerRun float64 `json:"wal_bytes_per_run"`
	CPUMsPerRun    float64 `json:"cpu_ms_per_run"`
	// WALFrom and WALTo bound the timed part's WAL, for pg_walinspect's
	// pg_get_wal_stats(from, to, true) while its segments are kept.
	WALFrom string `json:"wal_from"`
	WALTo   string `json:"wal_to"`
	// OwnCPUMsPerRun is the benchmark process's own share of CPUMsPerRun:
	// the clients, and the worker where it runs in process (all but C, D
	// and S); the rest is PostgreSQL's, the worker processes' and the
	// machine's other work.
	OwnCPUMsPerRun float64  `json:"own_cpu_ms_per_run"`
	P50Ms          *float64 `json:"p50_ms,omitempty"`
	P90Ms          *float64 `json:"p90_ms,omitempty"`
	LeasesLost     *int64   `json:"leases_lost,omitempty"`
	Completed      int      `json:"completed"` // runs found finished afterwards
	// History is how many finished runs the system's tables held before
	// the workload (-history).
	History int `json:"history"`
	// ForeignSamples counts the 100ms samples of the timed part in which
	// another client's session was active: non-zero means the cluster-wide
	// counters include someone else's work.
	ForeignSamples int `json:"foreign_samples"`
	// Checks are the workload's figures against their targets (L, F-*).
	Checks []check `json:"checks,omitempty"`
}

var allSystems = []string{"tenure", "river", "dbos"}

// allLoads are the workloads a plain go run measures; flowLoads, which take
// minutes at full scale, run when -workloads names them.
var allLoads = []string{"A", "A'", "B", "C", "D", "E", "S", "L"}
var flowLoads = []string{"F-conc", "F-rate", "F-breaker"}

// moreLoads run only when -workloads names them: the flow scenarios and H,
// which fills histories of up to 10^7 attempts (growth.go; about 15 minutes).
var moreLoads = append(slices.Clone(flowLoads), "H", "R")

// supports says which system takes part in which workload.
var supports = map[string][]string{
	"A":  {"tenure", "dbos"},
	"A'": {"tenure", "river"},
	"B":  {"tenure", "dbos"},
	"C":  {"tenure", "river", "dbos"},
	"D":  {"tenure"},
	"E":  {"tenure"},
	"S":  {"tenure"},
	"L":  {"tenure"},
	// The flow scenarios.
	"F-conc":    {"tenure"},
	"F-rate":    {"tenure"},
	"F-breaker": {"tenure"},
	"H":         {"tenure"},
	"R":         {"river"},
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(workerMain(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := mainErr(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func mainErr(ctx context.Context, args []string, out, log io.Writer) error {
	c, files, err := parseArgs(args, log)
	if err != nil {
		return err
	}
	if files.cpuProfile != "" {
		f, err := os.Create(files.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	results, err := runAll(ctx, c)
	printTable(out, results)
	if files.json != "" {
		b, jerr := json.MarshalIndent(results, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(files.json, append(b, '\n'), 0o644)
		}
		err = errors.Join(err, jerr)
	}
	return err
}

// outFiles are the files an invocation writes besides its table.
type outFiles struct{ json, cpuProfile string }

// parseArgs reads the command line into the configuration of the
// workloads, or says what is wrong with it.
func parseArgs(args []string, log io.Writer) (config, outFiles, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(log)
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = defaultURL
	}
	fs.StringVar(&url, "database", url, "PostgreSQL URL (default $DATABASE_URL, else the local server)")
	systems := fs.String("systems", strings.Join(allSystems, ","), "systems to measure")
	loads := fs.String("workloads", strings.Join(allLoads, ","), "workloads to run (also "+strings.Join(moreLoads, ", ")+")")
	var scale float64
	fs.Float64Var(&scale, "scale", 1, "multiply every run count (0.1 for a quick run)")
	fs.Float64Var(&scale, "n", 1, "same as -scale")
	jsonOut := fs.String("json", "", "also write the results as JSON to this file")
	c := config{log: log, prefix: "bench", stepsB: 10, callers: 100, poolSize: 20, dWorkers: []int{1, 2, 4}}
	fs.IntVar(&c.tenureConcurrency, "tenure-concurrency", 100, "Tenure worker Concurrency (matches the 100 callers)")
	fs.IntVar(&c.tenureDrain, "tenure-drain-concurrency", 1000, "Tenure worker Concurrency in A' (a drain: River gets 2000 workers)")
	fs.IntVar(&c.riverWorkers, "river-workers", 2000, "River MaxWorkers (riverbench's value)")
	fs.DurationVar(&c.riverCooldown, "river-fetch-cooldown", 2*time.Millisecond, "River FetchCooldown (riverbench's value)")
	fs.DurationVar(&c.riverPoll, "river-fetch-poll", 20*time.Millisecond, "River FetchPollInterval (riverbench's value)")
	fs.IntVar(&c.callers, "callers", c.callers, "concurrent callers in A and B")
	fs.IntVar(&c.history, "history", 0, "fill each system's tables with this many finished runs (vacuumed and analysed) before each workload, outside the timed part")
	fs.IntVar(&c.partitions, "partitions", 0, "Tenure's steps and attempts as this many range partitions of the run ID, a day each (0: not partitioned; partitions.go)")
	fs.IntVar(&c.lRounds, "l-rounds", 2, "L: pairs of its variants, in the order none, limit, limit, none, ...")
	fs.IntVar(&c.lLimit, "l-limit", 100000, "L: the concurrency limit, which never binds")
	fs.IntVar(&c.rRounds, "r-rounds", 2, "R: pairs of its variants, in the order none, adapter, adapter, none, ...")
	dWorkers := fs.String("d-workers", "1,2,4", "D: the numbers of worker processes to drain with, in order")
	hAttempts := fs.String("h-attempts", "100000,1000000,10000000", "H: the sizes of history to measure, in attempts")
	fs.IntVar(&c.flow.workers, "flow-workers", 4, "flow scenarios: worker processes")
	fs.IntVar(&c.flow.workerConcurrency, "flow-worker-concurrency", 20, "flow scenarios: runs each worker process executes at once")
	fs.DurationVar(&c.flow.lease, "flow-lease", 5*time.Second, "flow scenarios: the workers' LeaseTTL (F-conc's kill waits for it)")
	fs.DurationVar(&c.flow.poll, "flow-poll", 0, "flow scenarios: the workers' PollInterval (default the runtime's, 1s)")
	fs.DurationVar(&c.flow.activity, "flow-activity", 200*time.Millisecond, "F-conc: how long each call takes")
	fs.DurationVar(&c.flow.openFor, "flow-open-for", 0, "F-breaker: the breaker's open time (default flow's, 5s)")
	flowWindow := fs.Duration("flow-seconds", time.Minute, "F-rate's window and F-breaker's outage (times -scale)")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile (the in-process workers and clients) to this file")
	if err := fs.Parse(args); err != nil {
		return c, outFiles{}, err
	}
	if fs.NArg() > 0 {
		return c, outFiles{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.url = url
	c.systems = strings.Split(*systems, ",")
	c.loads = strings.Split(*loads, ",")
	for _, s := range c.systems {
		if !slices.Contains(allSystems, s) {
			return c, outFiles{}, fmt.Errorf("unknown system %q (have %s)", s, strings.Join(allSystems, ","))
		}
	}
	for _, l := range c.loads {
		if !slices.Contains(allLoads, l) && !slices.Contains(moreLoads, l) {
			return c, outFiles{}, fmt.Errorf("unknown workload %q (have %s)", l, strings.Join(append(slices.Clone(allLoads), moreLoads...), ","))
		}
	}
	var err error
	if c.hAttempts, err = positiveInts(*hAttempts); err != nil {
		return c, outFiles{}, fmt.Errorf("-h-attempts %q: want sizes of history in attempts, each 1 or more, separated by commas", *hAttempts)
	}
	if c.dWorkers, err = positiveInts(*dWorkers); err != nil {
		return c, outFiles{}, fmt.Errorf("-d-workers %q: want numbers of worker processes, each 1 or more, separated by commas", *dWorkers)
	}
	if c.history < 0 {
		return c, outFiles{}, fmt.Errorf("-history %d: want 0 or more finished runs", c.history)
	}
	n := func(base int) int { return max(1, int(float64(base)*scale+0.5)) }
	c.runsA, c.runsB, c.runsC, c.runsD = n(5000), n(500), n(200), n(3000)
	c.flow.concRuns, c.flow.concLimit = n(4000), 20
	c.flow.rate, c.flow.burst, c.flow.keys, c.flow.breakerRPS = 50, 10, 3, 100
	c.flow.seconds = max(5*time.Second, time.Duration(float64(*flowWindow)*scale))
	return c, outFiles{json: *jsonOut, cpuProfile: *cpuProfile}, nil
}

// runAll runs every chosen workload on every chosen system that supports it,
// one after the other, workload by workload so that neighbours compare.
func runAll(ctx context.Context, c config) ([]result, error) {
	m, err := newMeter(ctx, c.url)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact(c.url), err)
	}
	defer m.close()
	var results []result
	for _, load := range append(slices.Clone(allLoads), moreLoads...) {
		if !slices.Contains(c.loads, load) {
			continue
		}
		for _, sys := range allSystems {
			if !slices.Contains(c.systems, sys) || !slices.Contains(supports[load], sys) {
				continue
			}
			fmt.Fprintf(c.log, "bench: %s on %s\n", load, sys)
			rs, err := runOne(ctx, c, m, load, sys)
			for i := range rs {
				rs[i].History = c.history
			}
			results = append(results, rs...)
			if err != nil {
				return results, fmt.Errorf("%s on %s: %w", load, sys, err)
			}
		}
	}
	return results, nil
}

func runOne(ctx context.Context, c config, m *meter, load, sys string) ([]result, error) {
	one := func(r result, err error) ([]result, error) { return []result{r}, err }
	switch sys + " " + load {
	case "tenure A":
		return one(tenureCallers(ctx, c, m, "A", c.runsA, 1, 0))
	case "tenure A'":
		return one(tenureDrain(ctx, c, m))
	case "tenure B":
		return one(tenureCallers(ctx, c, m, "B", c.runsB, c.stepsB, 0))
	case "tenure E":
		return one(tenureCallers(ctx, c, m, "E", c.runsB, c.stepsB, 1))
	case "tenure S":
		return one(tenureSignal(ctx, c, m))
	case "tenure C":
		return one(tenureLatency(ctx, c, m))
	case "tenure D":
		return tenureFleet(ctx, c, m)
	case "tenure L":
		return tenureLimits(ctx, c, m)
	case "tenure F-conc":
		return one(flowConc(ctx, c, m))
	case "tenure F-rate":
		return one(flowRate(ctx, c, m))
	case "tenure H":
		return tenureGrowth(ctx, c, m)
	case "tenure F-breaker":
		return one(flowBreaker(ctx, c, m))
	case "river A'":
		return one(riverDrain(ctx, c, m))
	case "river R":
		return riverAdapterRounds(ctx, c, m)
	case "river C":
		return one(riverLatency(ctx, c, m))
	case "dbos A":
		return one(dbosCallers(ctx, c, m, "A", c.runsA, 1))
	case "dbos B":
		return one(dbosCallers(ctx, c, m, "B", c.runsB, c.stepsB))
	case "dbos C":
		return one(dbosLatency(ctx, c, m))
	}
	return nil, fmt.Errorf("no such combination")
}

func printTable(w io.Writer, results []result) {
	fmt.Fprintf(w, "%-9s %-7s %4s %6s %10s %10s %9s %10s %8s %8s %8s %8s %6s %5s %8s\n",
		"load", "system", "proc", "runs", "runs/s", "steps/s", "xacts/run", "WAL B/run", "CPU ms", "own ms", "p50 ms", "p90 ms", "lost", "noise", "history")
	opt := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f", *p)
	}
	for _, r := range results {
		steps, procs, lost := "-", "-", "-"
		if r.StepsPerSec > 0 && r.Steps > 1 {
			steps = fmt.Sprintf("%.0f", r.StepsPerSec)
		}
		if r.Workers > 0 {
			procs = fmt.Sprint(r.Workers)
		}
		if r.LeasesLost != nil {
			lost = fmt.Sprint(*r.LeasesLost)
		}
		load := r.Workload
		if r.Variant != "" {
			load += "/" + r.Variant
		}
		fmt.Fprintf(w, "%-9s %-7s %4s %6d %10.0f %10s %9.3f %10.0f %8.2f %8.2f %8s %8s %6s %5d %8d\n",
			load, r.System, procs, r.Runs, r.RunsPerSec, steps, r.XactsPerRun, r.WALBytesPerRun, r.CPUMsPerRun, r.OwnCPUMsPerRun, opt(r.P50Ms), opt(r.P90Ms), lost, r.ForeignSamples, r.History)
	}
	printChecks(w, results)
}

// printChecks lists the figures of the workloads that have targets, each
// PASS or MISS.
func printChecks(w io.Writer, results []result) {
	first := true
	for _, r := range results {
		for _, ch := range r.Checks {
			if first {
				fmt.Fprintln(w)
				first = false
			}
			verdict := "MISS"
			if ch.Pass {
				verdict = "PASS"
			}
			fmt.Fprintf(w, "%-4s %-9s %s: %s (target %s)\n", verdict, r.Workload, ch.Name, ch.Figure, ch.Target)
		}
	}
}

// redact hides a password in a URL for error messages.
func redact(url string) string {
	if at := strings.LastIndex(url, "@"); at > 0 {
		if scheme := strings.Index(url, "://"); scheme > 0 && scheme < at {
			if colon := strings.Index(url[scheme+3:at], ":"); colon >= 0 {
				return url[:scheme+3+colon] + ":***" + url[at:]
			}
		}
	}
	return url
}

// positiveInts parses a list of integers of 1 or more separated by commas.
func positiveInts(list string) ([]int, error) {
	var vs []int
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not an integer of 1 or more", f)
		}
		vs = append(vs, v)
	}
	return vs, nil
}
