package runtime

import "context"

// loop is a goroutine a part of the worker starts and stops (the listener,
// the lease keeper): stop cancels its context and waits for it to return.
type loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startLoop runs f in a goroutine with a context of its own, derived from
// ctx, until stop.
func startLoop(ctx context.Context, f func(context.Context)) loop {
	ctx, cancel := context.WithCancel(ctx)
	l := loop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		f(ctx)
	}()
	return l
}

// stop cancels the loop's context and waits for it to return; a loop never
// started stops at once.
func (l loop) stop() {
	if l.cancel == nil {
		return
	}
	l.cancel()
	<-l.done
}
