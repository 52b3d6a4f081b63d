package invariant

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/store"
)

// Listener counts the completion notices of runs: Tenure announces on the
// done channel, in the transaction that ends a run (completion or failure),
// the run's ID (with the IDs of the other runs that transaction ended). Two notices for one run mean two ends were accepted.
type Listener struct {
	cancel context.CancelFunc
	done   chan struct{}
	ready  chan struct{}

	mu      sync.Mutex
	notices map[uuid.UUID]int
	drops   int // connections lost while listening
}

// Listen starts counting the notices of schema's runs on a connection of
// pool, reconnecting when it is lost. Stop it with Stop.
func Listen(pool *pgxpool.Pool, schema string) (*Listener, error) {
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{cancel: cancel, done: make(chan struct{}), ready: make(chan struct{}), notices: map[uuid.UUID]int{}}
	go l.loop(ctx, pool, pgx.Identifier{st.DoneChannel()}.Sanitize())
	return l, nil
}

// Ready is closed once the first LISTEN has taken effect: notices of runs
// ended from then on are counted.
func (l *Listener) Ready() <-chan struct{} { return l.ready }

func (l *Listener) loop(ctx context.Context, pool *pgxpool.Pool, channel string) {
	defer close(l.done)
	var readyOnce sync.Once
	for ctx.Err() == nil {
		err := l.listenOnce(ctx, pool, channel, func() { readyOnce.Do(func() { close(l.ready) }) })
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			l.mu.Lock()
			l.drops++
			l.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (l *Listener) listenOnce(ctx context.Context, pool *pgxpool.Pool, channel string, ready func()) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		_ = conn.Conn().Close(context.Background()) // never back to the pool listening
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return err
	}
	ready()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		// A worker announces every run one commit ended in one notice.
		l.mu.Lock()
		for p := range strings.SplitSeq(n.Payload, ",") {
			if id, err := uuid.Parse(p); err == nil {
				l.notices[id]++
			}
		}
		l.mu.Unlock()
	}
}

// Stop stops listening and returns the notices per run and whether the
// listener kept its connection throughout (then every notice was seen).
func (l *Listener) Stop() (notices map[uuid.UUID]int, complete bool) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.notices, l.drops == 0
}

// Count returns the notices seen so far for run id.
func (l *Listener) Count(id uuid.UUID) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.notices[id]
}

// CatchUp waits until every ended run of schema has at least one notice
// counted, or ctx ends: a notice is delivered after its transaction
// commits, so a run read as ended may still have its notice on the way.
func (l *Listener) CatchUp(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	q := `SELECT id FROM ` + pgx.Identifier{schema}.Sanitize() + `.runs WHERE status IN ('completed', 'failed')`
	for {
		rows, err := pool.Query(ctx, q)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		missing := 0
		for _, id := range ids {
			if l.Count(id) == 0 {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("invariant: %d ended runs without a completion notice: %w", missing, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
