package riveradapter

import (
	"context"
	"fmt"
	"sync"
)

// maxBatch bounds the calls one statement carries.
const maxBatch = 256

// batch sends the calls of concurrent jobs in one statement, with natural
// batching as Tenure's group commit does: the first caller runs the
// statement for every call waiting, and the calls that come meanwhile wait
// for the next, which the first of them runs. No goroutine of its own.
type batch[Req, Res any] struct {
	run func(context.Context, []Req) ([]Res, error)

	mu      sync.Mutex
	pending []*call[Req, Res]
	busy    bool
}

type call[Req, Res any] struct {
	req  Req
	res  Res
	err  error
	done chan struct{} // closed with res and err set
	lead chan struct{} // closed when this call is to run the next statement
}

// do runs req in a statement with the calls waiting beside it, and waits
// for its result, whatever ctx: a call that was sent is always waited for
// (the statement has its own timeout), so that its effect is known.
func (b *batch[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	c := &call[Req, Res]{req: req, done: make(chan struct{}), lead: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if b.busy {
		b.mu.Unlock()
		select {
		case <-c.done:
			return c.res, c.err
		case <-c.lead:
		}
	} else {
		b.busy = true
		b.mu.Unlock()
	}
	b.flush(ctx)
	<-c.done
	return c.res, c.err
}

// flush runs one statement for the calls waiting (the caller's among
// them), then hands the next to the first call still waiting, if any.
func (b *batch[Req, Res]) flush(ctx context.Context) {
	b.mu.Lock()
	n := min(len(b.pending), maxBatch)
	calls := b.pending[:n:n]
	b.pending = b.pending[n:]
	b.mu.Unlock()

	reqs := make([]Req, len(calls))
	for i, c := range calls {
		reqs[i] = c.req
	}
	res, err := b.runSafe(context.WithoutCancel(ctx), reqs)
	if err == nil && len(res) != len(calls) {
		err = fmt.Errorf("riveradapter: the statement returned %d rows for %d jobs", len(res), len(calls))
	}
	for i, c := range calls {
		if err == nil {
			c.res = res[i]
		}
		c.err = err
		close(c.done)
	}

	b.mu.Lock()
	if len(b.pending) > 0 {
		close(b.pending[0].lead)
	} else {
		b.busy = false
	}
	b.mu.Unlock()
}

// runSafe is b.run, a panic of which is the calls' error: their waiters
// are released and the next statement is handed on as after any error.
func (b *batch[Req, Res]) runSafe(ctx context.Context, reqs []Req) (res []Res, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("riveradapter: the batch's statement panicked: %v", p)
		}
	}()
	return b.run(ctx, reqs)
}
