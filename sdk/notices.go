package sdk

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// notices shares one LISTEN connection among all of a client's Result calls.
// The connection is opened beside the pool (with its settings), so waiting
// callers never hold pooled connections that Start and the rest need; it is
// opened for the first waiter and closed after the last, so an idle client
// keeps no connection and no goroutine.
type notices struct {
	mu      sync.Mutex
	waiters map[uuid.UUID][]chan struct{}
	stop    context.CancelFunc
	stopped chan struct{}
}

// subscribe registers a waiter for run id; the channel receives a value when
// the run's completion notice arrives.
func (n *notices) subscribe(c *Client, id uuid.UUID) chan struct{} {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.waiters == nil {
		n.waiters = map[uuid.UUID][]chan struct{}{}
	}
	n.waiters[id] = append(n.waiters[id], ch)
	if n.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		n.stop, n.stopped = cancel, make(chan struct{})
		go n.listen(ctx, c, n.stopped)
	}
	return ch
}

// unsubscribe removes a waiter; the last one stops the listener and waits
// for it to end.
func (n *notices) unsubscribe(id uuid.UUID, ch chan struct{}) {
	n.mu.Lock()
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
	var stop context.CancelFunc
	var stopped chan struct{}
	if len(n.waiters) == 0 && n.stop != nil {
		stop, stopped = n.stop, n.stopped
		n.stop, n.stopped = nil, nil
	}
	n.mu.Unlock()
	if stop != nil {
		stop()
		<-stopped
	}
}

// wake signals the waiters of the runs named by a notice's payload: run IDs
// joined by "," (a worker announces a whole commit's runs in one notice).
func (n *notices) wake(payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for p := range strings.SplitSeq(payload, ",") {
		id, err := uuid.Parse(p)
		if err != nil {
			continue
		}
		for _, ch := range n.waiters[id] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// listen LISTENs on the done channel until ctx ends, reconnecting after a
// failure; meanwhile the waiters poll.
func (n *notices) listen(ctx context.Context, c *Client, stopped chan struct{}) {
	defer close(stopped)
	channel := "LISTEN " + pgx.Identifier{c.store.DoneChannel()}.Sanitize()
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, c.store.Pool().Config().ConnConfig.Copy())
		if err == nil {
			if _, err = conn.Exec(ctx, channel); err == nil {
				for {
					note, err := conn.WaitForNotification(ctx)
					if err != nil {
						break
					}
					n.wake(note.Payload)
				}
			}
			_ = conn.Close(context.WithoutCancel(ctx))
		}
		select {
		case <-ctx.Done():
		case <-time.After(c.poll):
		}
	}
}
