package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/runtime"
)

// The worker subprocess (`bench worker -schema S ...`) speaks a line
// protocol: it prints "ready" once its pool is connected; it starts its
// worker when it reads "go" on stdin; when stdin closes (or on SIGTERM) it
// shuts the worker down, prints its runtime.Stats as one JSON line and exits.
// A parent that dies closes the worker's stdin, so no worker outlives it.

// workerOpts are a worker subprocess's settings, its command line.
type workerOpts struct {
	url, schema string
	label       string // runtime.Config.Label; "": the default
	concurrency int
	poolSize    int32
	lease       time.Duration // runtime.Config.LeaseTTL; 0: the default
	poll        time.Duration // runtime.Config.PollInterval; 0: the default
	flow        string        // a flowSpec as JSON: the flow scenario it serves; "": none
}

// args is the command line that gives a worker subprocess o.
func (o workerOpts) args() []string {
	a := []string{"worker", "-database", o.url, "-schema", o.schema,
		"-concurrency", strconv.Itoa(o.concurrency), "-pool", strconv.Itoa(int(o.poolSize))}
	if o.label != "" {
		a = append(a, "-label", o.label)
	}
	if o.lease > 0 {
		a = append(a, "-lease", o.lease.String())
	}
	if o.poll > 0 {
		a = append(a, "-poll", o.poll.String())
	}
	if o.flow != "" {
		a = append(a, "-flow", o.flow)
	}
	return a
}

// workerMain is the subprocess; it returns the exit code.
func workerMain(args []string) int {
	fs := flag.NewFlagSet("bench worker", flag.ContinueOnError)
	var o workerOpts
	fs.StringVar(&o.url, "database", defaultURL, "PostgreSQL URL")
	fs.StringVar(&o.schema, "schema", "bench_tenure", "Tenure schema")
	fs.StringVar(&o.label, "label", "", "worker label (default host-pid-random)")
	fs.IntVar(&o.concurrency, "concurrency", 100, "worker Concurrency")
	poolSize := fs.Int("pool", 20, "pool connections")
	fs.DurationVar(&o.lease, "lease", 0, "worker LeaseTTL (default the runtime's)")
	fs.DurationVar(&o.poll, "poll", 0, "worker PollInterval (default the runtime's)")
	fs.StringVar(&o.flow, "flow", "", "flow scenario to serve, as JSON (flowSpec)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.poolSize = int32(*poolSize)
	if err := workerRun(o, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench worker:", err)
		return 1
	}
	return 0
}

func workerRun(o workerOpts, in io.Reader, out io.Writer) error {
	ctx := context.Background()
	pool, err := newPool(ctx, o.url, o.poolSize)
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	w, err := runtime.NewWorker(pool, runtime.Config{Schema: o.schema, Label: o.label, Concurrency: o.concurrency,
		LeaseTTL: o.lease, PollInterval: o.poll, Logger: logger})
	if err != nil {
		return err
	}
	if err := w.Register(benchWF); err != nil {
		return err
	}
	if o.flow != "" {
		closeFlow, err := registerFlow(ctx, w, o)
		if err != nil {
			return err
		}
		defer closeFlow()
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(term)

	fmt.Fprintln(out, "ready")
	select {
	case l, ok := <-lines:
		if !ok || l != "go" {
			return nil // the parent gave up before the start
		}
	case <-term:
		return nil
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	select {
	case <-drain(lines):
	case <-term:
	}
	err = stopWorker(w)
	b, jerr := json.Marshal(w.Stats())
	fmt.Fprintln(out, string(b))
	return errors.Join(err, jerr)
}

// drain reads lines until the channel closes.
func drain(lines <-chan string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range lines {
		}
		close(done)
	}()
	return done
}

// proc is one worker subprocess seen from the parent.
type proc struct {
	label string // its worker's label, when the parent chose it
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its stdout, line by line; closed at EOF
	done  bool
}

// fleet is the worker subprocesses of one workload.
type fleet []*proc

// spawnWorkers starts k worker subprocesses (this binary, re-executed) on
// schema and waits until each has connected its pool.
func spawnWorkers(ctx context.Context, c config, schema string, k int) (fleet, error) {
	return spawnFleet(ctx, c, k, func(int) workerOpts {
		return workerOpts{url: c.url, schema: schema, concurrency: c.tenureConcurrency}
	})
}

// spawnFleet starts k worker subprocesses, the i-th with opts(i) (its pool
// size set here), and waits until each has connected its pool.
func spawnFleet(ctx context.Context, c config, k int, opts func(i int) workerOpts) (fleet, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// The fleet shares the 20 connections (at least 4 each): four worker
	// processes, each also opening its heartbeat, LISTEN and committer
	// connections, then fit beside this process's pool in PostgreSQL's
	// default max_connections of 100.
	size := max(int(c.poolSize)/k, 4)
	var f fleet
	for i := range k {
		o := opts(i)
		o.poolSize = int32(size)
		cmd := exec.Command(exe, o.args()...)
		cmd.Stderr = c.log
		p := &proc{label: o.label, cmd: cmd, lines: make(chan string, 4)}
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			f.kill()
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			f.kill()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			f.kill()
			return nil, fmt.Errorf("start worker process: %w", err)
		}
		f = append(f, p)
		go func() {
			defer close(p.lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				p.lines <- sc.Text()
			}
		}()
	}
	for i, p := range f {
		if l, err := p.next(ctx, time.Minute); err != nil || l != "ready" {
			f.kill()
			return nil, fmt.Errorf("worker process %d did not get ready (%q): %v", i, l, err)
		}
	}
	return f, nil
}

// next returns the process's next line of output.
func (p *proc) next(ctx context.Context, timeout time.Duration) (string, error) {
	select {
	case l, ok := <-p.lines:
		if !ok {
			return "", errors.New("the process closed its output")
		}
		return l, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("no output in %s", timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// start tells every worker to start claiming.
func (f fleet) start() error {
	for i, p := range f {
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			return fmt.Errorf("worker process %d: %w", i, err)
		}
	}
	return nil
}

// stop shuts every worker down, waits for it and returns the sum of their
// stats.
func (f fleet) stop() (runtime.Stats, error) {
	var sum runtime.Stats
	var errs []error
	for _, p := range f {
		_ = p.stdin.Close()
	}
	for i, p := range f {
		if p.done { // killed and reaped (the flow scenarios kill one)
			continue
		}
		var s runtime.Stats
		l, err := p.next(context.Background(), time.Minute)
		if err == nil {
			err = json.Unmarshal([]byte(l), &s)
		}
		if err != nil {
			_ = p.cmd.Process.Kill()
		}
		werr := p.cmd.Wait()
		p.done = true
		if err = errors.Join(err, werr); err != nil {
			errs = append(errs, fmt.Errorf("worker process %d: %w", i, err))
			continue
		}
		sum.Claimed += s.Claimed
		sum.Completed += s.Completed
		sum.Failed += s.Failed
		sum.LeasesLost += s.LeasesLost
		sum.Released += s.Released
		sum.Attempts += s.Attempts
		sum.Suspended += s.Suspended
		sum.Throttled += s.Throttled
	}
	return sum, errors.Join(errs...)
}

// killOne sends p SIGKILL and reaps it: the process dies without a last
// write, as an OOM kill would end it.
func (p *proc) killOne() error {
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	_ = p.cmd.Wait() // "signal: killed"
	p.done = true
	return nil
}

// kill ends every process not yet waited for; it is safe after stop.
func (f fleet) kill() {
	for _, p := range f {
		if p.done {
			continue
		}
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.done = true
	}
}
