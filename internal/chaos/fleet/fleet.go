// Package fleet starts and controls worker processes (the program in
// internal/chaos/worker) for the chaos tests and the chaos command: build the
// binary, start workers, and kill, freeze, resume or stop them with real
// signals, reading their stats and logs as they go.
package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/runtime"
)

// WorkerPackage is the import path of the worker program.
const WorkerPackage = "github.com/tenurehq/tenure/internal/chaos/worker"

// Build compiles the worker program into dir and returns the binary's path.
// It runs `go build`, so it needs the Go toolchain and a working directory
// inside the module.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "chaos-worker")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, WorkerPackage)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", WorkerPackage, err, out)
	}
	return bin, nil
}

// Config is how workers are started. Zero durations take the worker
// program's defaults (lease 1s, heartbeat 250ms, poll 50ms, drain 1s).
type Config struct {
	Binary      string // path returned by Build
	DatabaseURL string // passed in the environment, never on the command line
	Schema      string
	Concurrency int // default 8
	LeaseTTL    time.Duration
	Heartbeat   time.Duration
	Poll        time.Duration
	Drain       time.Duration
	Schedule    string // the spec of the schedule chaos-schedule the worker declares; "": none
	// ClockSkew moves the worker process's wall clock: its every time.Now
	// returns the real time plus ClockSkew (may be negative; linux/amd64
	// only, where the worker patches time.Now; 0: its real clock).
	ClockSkew time.Duration
}

// Worker is one running (or finished) worker process.
type Worker struct {
	// Label is the label the worker was started with.
	Label string

	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has been waited for
	started chan struct{} // closed at the "started" line

	mu      sync.Mutex
	log     []string        // stderr lines
	stats   []runtime.Stats // stats lines (SIGUSR1 and exit), in order
	exited  bool            // an exit line was printed
	clock   time.Time       // the worker's time.Now() on its started line
	statsCh chan struct{}   // closed and replaced at each stats line
	state   *os.ProcessState
}

// Start starts a worker process with the given label.
func Start(cfg Config, label string) (*Worker, error) {
	args := []string{"-schema", cfg.Schema, "-label", label}
	if cfg.Concurrency > 0 {
		args = append(args, "-concurrency", strconv.Itoa(cfg.Concurrency))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"-lease", cfg.LeaseTTL}, {"-heartbeat", cfg.Heartbeat}, {"-poll", cfg.Poll}, {"-drain", cfg.Drain}} {
		if f.d > 0 {
			args = append(args, f.name, f.d.String())
		}
	}
	if cfg.Schedule != "" {
		args = append(args, "-schedule", cfg.Schedule)
	}
	if cfg.ClockSkew != 0 {
		args = append(args, "-clock-skew", cfg.ClockSkew.String())
	}
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+cfg.DatabaseURL)
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = 5 * time.Second
	w := &Worker{Label: label, cmd: cmd, done: make(chan struct{}), started: make(chan struct{}), statsCh: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s: %w", label, err)
	}
	var readers sync.WaitGroup
	readers.Go(func() { w.readStdout(stdout) })
	readers.Go(func() { w.readStderr(stderr) })
	go func() {
		readers.Wait() // the pipes must be drained before Wait closes them
		_ = cmd.Wait()
		w.mu.Lock()
		w.state = cmd.ProcessState
		w.mu.Unlock()
		close(w.done)
	}()
	return w, nil
}

func (w *Worker) readStdout(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e struct {
			Event string         `json:"event"`
			Stats *runtime.Stats `json:"stats"`
			Clock time.Time      `json:"clock"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		if e.Event == "started" {
			w.mu.Lock()
			w.clock = e.Clock
			w.mu.Unlock()
			close(w.started)
		}
		if e.Stats == nil {
			continue
		}
		w.mu.Lock()
		w.stats = append(w.stats, *e.Stats)
		w.exited = w.exited || e.Event == "exit"
		close(w.statsCh)
		w.statsCh = make(chan struct{})
		w.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
}

func (w *Worker) readStderr(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		w.mu.Lock()
		w.log = append(w.log, sc.Text())
		w.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
}

// Started is closed once the worker process has registered its workflows
// and started running.
func (w *Worker) Started() <-chan struct{} { return w.started }

// Clock returns the worker's time.Now() when it printed its started line
// (the zero Time before): the real time plus its ClockSkew, which the caller
// can compare with the database's clock to see that the skew took effect.
func (w *Worker) Clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.clock
}

// PID returns the worker's process ID.
func (w *Worker) PID() int { return w.cmd.Process.Pid }

func (w *Worker) signal(s syscall.Signal) error {
	select {
	case <-w.done:
		return os.ErrProcessDone
	default:
	}
	if err := w.cmd.Process.Signal(s); err != nil {
		return fmt.Errorf("%s to worker %s: %w", s, w.Label, err)
	}
	return nil
}

// Kill sends SIGKILL: the process dies at once, without a last write.
func (w *Worker) Kill() error { return w.signal(syscall.SIGKILL) }

// Freeze sends SIGSTOP: the process stops where it is, its connections open,
// until Resume.
func (w *Worker) Freeze() error { return w.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT to a frozen process.
func (w *Worker) Resume() error { return w.signal(syscall.SIGCONT) }

// Terminate sends SIGTERM: the worker shuts down gracefully, draining first.
func (w *Worker) Terminate() error { return w.signal(syscall.SIGTERM) }

// Done is closed when the process has exited and its output is read.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Wait waits for the process to exit, or ctx to end.
func (w *Worker) Wait(ctx context.Context) (*os.ProcessState, error) {
	select {
	case <-w.done:
		return w.state, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("worker %s (pid %d) still running: %w", w.Label, w.PID(), ctx.Err())
	}
}

// Close kills the process if it still runs (a frozen one too) and waits for
// it. It is what a test's cleanup calls.
func (w *Worker) Close() {
	_ = w.Kill()
	<-w.done
}

// KilledBy reports whether the process has ended by signal sig.
func (w *Worker) KilledBy(sig syscall.Signal) bool {
	select {
	case <-w.done:
	default:
		return false
	}
	ws, ok := w.state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// Signal returns the signal that ended the process, if one did.
func (w *Worker) Signal() (syscall.Signal, bool) {
	select {
	case <-w.done:
	default:
		return 0, false
	}
	ws, ok := w.state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}

// ExitCode returns the process's exit code, -1 if it was killed by a signal
// or still runs.
func (w *Worker) ExitCode() int {
	select {
	case <-w.done:
		return w.state.ExitCode()
	default:
		return -1
	}
}

// Stats asks the worker for its counters (SIGUSR1) and waits for the answer.
// After the worker exited gracefully it returns the counters it printed on exit.
func (w *Worker) Stats(ctx context.Context) (runtime.Stats, error) {
	w.mu.Lock()
	if w.exited {
		s := w.stats[len(w.stats)-1]
		w.mu.Unlock()
		return s, nil
	}
	next := w.statsCh
	w.mu.Unlock()
	if err := w.signal(syscall.SIGUSR1); err != nil {
		return runtime.Stats{}, err
	}
	select {
	case <-next:
	case <-w.done:
	case <-ctx.Done():
		return runtime.Stats{}, fmt.Errorf("stats of worker %s: %w", w.Label, ctx.Err())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.stats) == 0 {
		return runtime.Stats{}, errors.New("worker " + w.Label + " exited without printing stats")
	}
	return w.stats[len(w.stats)-1], nil
}

// ExitStats returns the counters the worker printed when it stopped
// gracefully; ok is false when it did not (it was killed, or still runs).
func (w *Worker) ExitStats() (s runtime.Stats, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.exited {
		return s, false
	}
	return w.stats[len(w.stats)-1], true
}

// Log returns the worker's stderr lines so far.
func (w *Worker) Log() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.log...)
}

// Count returns how many stderr lines so far contain substr.
func (w *Worker) Count(substr string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.log {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}
