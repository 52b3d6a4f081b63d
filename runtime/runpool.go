package runtime

import (
	"context"
	"runtime/pprof"
	"sync"

	"github.com/google/uuid"
)

// runPool holds the worker's executions, one per run it holds a lease on,
// and the goroutines that run them. The claimer adds to it, the lease
// keeper renews what it holds, and stop waits for every run to end.
type runPool struct {
	freed func() // a run ended: its slot is free (the claimer is woken)

	mu      sync.Mutex
	running map[uuid.UUID]*execution
	runs    sync.WaitGroup
	// idle hands a run to a goroutine of an earlier run that is waiting
	// for another (see goRun); loops counts those goroutines, which end
	// when stopped is closed.
	idle    chan func()
	stopped chan struct{}
	loops   sync.WaitGroup
}

func newRunPool(freed func()) *runPool {
	return &runPool{
		freed:   freed,
		running: map[uuid.UUID]*execution{},
		idle:    make(chan func()),
		stopped: make(chan struct{}),
	}
}

// start holds e as the execution of run id and runs it; when it ends, it is
// dropped (unless the run is held again under a newer lease) and its slot
// freed.
func (p *runPool) start(id uuid.UUID, e *execution) {
	p.mu.Lock()
	old := p.running[id]
	p.running[id] = e
	p.mu.Unlock()
	if old != nil {
		// This worker held the run under an older lease, which expired
		// (it froze, or its lease was ended for it): that execution is
		// no longer heartbeated, so it is stopped here, as a renewal
		// missing its lease would.
		old.lose("the run was reclaimed under a newer lease")
	}
	p.goRun(func() {
		defer func() {
			p.mu.Lock()
			if p.running[id] == e { // this worker may hold the run again under a newer lease
				delete(p.running, id)
			}
			p.mu.Unlock()
			p.freed()
		}()
		e.run()
	})
}

// get is the execution of run id, nil when the worker does not hold it.
func (p *runPool) get(id uuid.UUID) *execution {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running[id]
}

// count is how many runs the worker holds.
func (p *runPool) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.running)
}

// holding is how many runs the worker holds and, with ids, their IDs, at
// one instant.
func (p *runPool) holding(ids bool) (int, []uuid.UUID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var held []uuid.UUID
	if ids {
		for id := range p.running {
			held = append(held, id)
		}
	}
	return len(p.running), held
}

// held is the executions the worker holds, as of now.
func (p *runPool) held() []*execution {
	p.mu.Lock()
	defer p.mu.Unlock()
	held := make([]*execution, 0, len(p.running))
	for _, e := range p.running {
		held = append(held, e)
	}
	return held
}

// each calls f for every held execution, with the pool locked: f must not
// call back into it.
func (p *runPool) each(f func(*execution)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.running {
		f(e)
	}
}

// goRun runs f, a claimed run's execution, on a goroutine that an earlier
// run has finished with, when one is waiting, or on a new one. A run's
// goroutine grows its stack to the depth of the workflow and its steps
// (JSON decoding, the write path): a new goroutine per run paid that growth
// every time (runtime.newstack was 17% of a worker's CPU per one-step run).
// A goroutine whose run ends by runtime.Goexit (the executor unwinding the
// workflow) ends with it. The goroutines waiting for runs end when the
// pool stops. A run's slot is freed (the claim loop woken) just before its
// goroutine waits for the next, so a claim may find none waiting yet and
// start another: there are at most about twice Concurrency.
// A goroutine carries over nothing of a run but what code of the run left
// on it: its pprof labels are reset; an OS thread an activity locked to it
// (runtime.LockOSThread without UnlockOSThread) stays locked for the runs
// after, where a goroutine of its own would have ended with it.
func (p *runPool) goRun(f func()) {
	p.runs.Add(1)
	task := func() {
		defer p.runs.Done()
		f()
	}
	select {
	case p.idle <- task:
	default:
		p.loops.Add(1)
		go p.runLoop(task)
	}
}

func (p *runPool) runLoop(task func()) {
	defer p.loops.Done()
	for {
		task()
		task = nil // nothing of the run kept while waiting
		pprof.SetGoroutineLabels(context.Background())
		select {
		case task = <-p.idle:
		case <-p.stopped:
			return
		}
	}
}

// stop waits for every run to end (finished or handed back), then ends the
// goroutines waiting for runs. Nothing may be added to the pool after.
func (p *runPool) stop() {
	p.runs.Wait()
	close(p.stopped)
	p.loops.Wait()
}
