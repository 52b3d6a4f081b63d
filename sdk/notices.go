package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/listener"
)

// listenIdle is how long the LISTEN connection stays open after its last
// waiter left, so that a caller waiting for one result after another finds it
// open instead of reconnecting, and missing its notice, every time.
const listenIdle = time.Minute

// notices shares one LISTEN connection among all of a client's Result calls.
// The connection is opened beside the pool (with its settings), so waiting
// callers never hold pooled connections that Start and the rest need. It is
// opened for the first waiter and closed once no one has waited for
// listenIdle, or by Client.Close.
type notices struct {
	mu      sync.Mutex
	waiters map[uuid.UUID][]chan struct{}
	stop    context.CancelFunc // stops the running listener; nil when none runs
	idle    *time.Timer        // stops it after listenIdle without waiters
	closed  bool
	// undelivered is set when the listener found that notices do not
	// arrive (a transaction pooler): waiters poll from then on.
	undelivered bool
	wg          sync.WaitGroup // the listener goroutines, current and stopping

	// listening is set while notices are known to arrive (from the
	// listener's Delivering to its Lost or stop). expected holds the runs
	// this client created meanwhile, until their first notice: their end's
	// notice cannot be missed, so Result need not read such a run before it
	// waits (see expect). Whatever ends that time (Lost, a new LISTEN, a
	// stop) clears it, so every entry in it is current.
	listening bool
	expected  map[uuid.UUID]struct{}
}

// maxExpected bounds notices.expected (about 40 bytes an entry): a client
// that starts more runs than this without their ending is read first again.
const maxExpected = 100_000

// expect records that run id, about to be created, is created while a
// LISTEN is in effect: the notice of its end cannot be missed, as the end
// commits after the creation, which commits after this call. A notice about
// the run (its end, an event) removes the entry, and the loss of the LISTEN
// connection, a new LISTEN or the listener's stop clears them all. Call unexpect
// when the run was not created. It reports whether it recorded the run.
func (n *notices) expect(id uuid.UUID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.listening || len(n.expected) >= maxExpected {
		return false
	}
	if n.expected == nil {
		n.expected = map[uuid.UUID]struct{}{}
	}
	n.expected[id] = struct{}{}
	return true
}

// unexpect drops the expectation of a run that was not created.
func (n *notices) unexpect(id uuid.UUID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.expected, id)
}

// forget drops every expectation: notices may have been missed. n.mu must
// be held.
func (n *notices) forget() { clear(n.expected) }

// subscribe registers a waiter for run id; the channel receives a value when
// the run's completion notice arrives, or when the listener starts listening
// (a notice sent before that is lost, so the waiter must read again).
//
// expected reports, and consumes, whether run id is one this client created
// while the LISTEN still in effect was (see expect): its end has not been
// notified, so the waiter can wait for the notice without reading first.
func (n *notices) subscribe(c *Client, id uuid.UUID) (ch chan struct{}, expected bool) {
	ch = make(chan struct{}, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, expected = n.expected[id]; expected {
		delete(n.expected, id)
	}
	if n.waiters == nil {
		n.waiters = map[uuid.UUID][]chan struct{}{}
	}
	n.waiters[id] = append(n.waiters[id], ch)
	if n.idle != nil {
		n.idle.Stop()
		n.idle = nil
	}
	if n.stop == nil && !n.closed && !n.undelivered && !c.pollOnly {
		ctx, cancel := context.WithCancel(context.Background())
		n.stop = cancel
		n.wg.Add(1)
		go n.listen(ctx, c)
	}
	return ch, expected
}

// unsubscribe removes a waiter; after the last one the listener stops once
// listenIdle passes with no new waiter.
func (n *notices) unsubscribe(id uuid.UUID, ch chan struct{}, idleAfter time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	list := n.waiters[id]
	for i, w := range list {
		if w == ch {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(n.waiters, id)
	} else {
		n.waiters[id] = list
	}
	if len(n.waiters) > 0 || n.stop == nil || n.idle != nil {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(idleAfter, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.idle == t && n.stop != nil {
			n.stop()
			n.stop, n.idle = nil, nil
			n.listening = false
			n.forget()
		}
	})
	n.idle = t
}

// close stops the listener for good and waits for it to end.
func (n *notices) close() {
	n.mu.Lock()
	n.closed = true
	if n.idle != nil {
		n.idle.Stop()
		n.idle = nil
	}
	if n.stop != nil {
		n.stop()
		n.stop = nil
	}
	n.listening = false
	n.forget()
	n.mu.Unlock()
	n.wg.Wait()
}

// wake signals the waiters of the runs named by a notice's payload: one run
// ID, or many joined by ",".
func (n *notices) wake(payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for field := range strings.SplitSeq(payload, ",") {
		id, err := uuid.Parse(strings.TrimSpace(field))
		if err != nil {
			continue
		}
		for _, ch := range n.waiters[id] {
			signal(ch)
		}
		delete(n.expected, id) // a Result from now on reads first
	}
}

// wakeAll signals every waiter: the listener has just started listening, and
// a notice sent before that was not received.
func (n *notices) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.forget() // a new LISTEN: notices between the last one's loss and now were missed
	for _, list := range n.waiters {
		for _, ch := range list {
			signal(ch)
		}
	}
}

// listen LISTENs on the done channel until ctx ends (see package
// listener), reconnecting after a failure; meanwhile the waiters poll. When
// notices do not arrive it stops, and no listener starts again.
func (n *notices) listen(ctx context.Context, c *Client) {
	defer n.wg.Done()
	err := listener.Run(ctx, listener.Config{
		Channel: c.store.DoneChannel(),
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			if c.listen != nil {
				return pgx.ConnectConfig(ctx, c.listen.Copy())
			}
			return pgx.ConnectConfig(ctx, c.store.Pool().Config().ConnConfig.Copy())
		},
		Send:      c.store.Notify,
		Dropped:   c.store.Dropped,
		Listening: n.wakeAll,
		// Expectations only while notices are known to arrive, and from
		// this listener only until it is stopped (its context, cancelled
		// under n.mu).
		Delivering: func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if ctx.Err() == nil {
				n.listening = true
			}
		},
		Lost: func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if ctx.Err() == nil {
				n.listening = false
				n.forget()
			}
		},
		Notify:    n.wake,
		Retry:     min(c.poll, time.Second), // a reconnection is cheap next to a long poll
		Timeout:   c.statementTimeout,       // connecting and LISTEN; the wait for notices has none
		Logger:    c.logger,
		What:      "result notifications",
		Meanwhile: fmt.Sprintf("Result polling every %s", c.poll),
		Fix: "Give the client a direct connection to PostgreSQL for LISTEN (sdk.WithListenConfig), " +
			"or use sdk.WithPollOnly to poll without listening (docs/operations.md, Connection poolers).",
	})
	n.mu.Lock()
	if errors.Is(err, listener.ErrNotDelivered) {
		n.undelivered = true
	}
	if ctx.Err() == nil { // it ended on its own (a stop cleared these already)
		n.listening = false
		n.forget()
	}
	n.mu.Unlock()
}
