package runtime

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// stepTx is the pooled connection and the transaction of one attempt of a
// transactional step.
//
// The connection is taken before the attempt is recorded, the transaction
// begun only after: behind a connection pooler in transaction mode an open
// transaction holds one of the pooler's few server connections, and steps
// holding them all while they wait for their attempts' commit (which needs
// one more) would wait for each other forever. An idle pooled connection
// holds no server connection.
type stepTx struct {
	conn *pgxpool.Conn // nil once returned to the pool
	tx   pgx.Tx        // nil until begun, and once ended
	// connLost: the transaction lost its connection (a database restart, a
	// network cut), noted by end, or by a COMMIT that lost it and did not
	// commit.
	connLost bool
	// unanswered: the database did not answer the step's checkpoint or its
	// COMMIT within StatementTimeout, while the activity's own deadline had
	// not passed, and the transaction did not commit (invokeTx).
	unanswered bool
}

// begin begins the transaction, each try within timeout. The attempt is
// already recorded, so a BEGIN that fails (typically on a pooled connection
// the database dropped) is tried again on other connections for up to
// limit, before the caller gives the attempt up as lost.
func (t *stepTx) begin(ctx context.Context, pool *pgxpool.Pool, limit, timeout time.Duration) error {
	deadline := time.Now().Add(limit)
	var err error
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		tctx, cancel := context.WithTimeout(ctx, timeout)
		if t.conn == nil {
			t.conn, err = pool.Acquire(tctx)
		}
		if t.conn != nil {
			t.tx, err = t.conn.Begin(tctx)
		}
		cancel()
		if t.conn != nil {
			if err == nil {
				return nil
			}
			t.conn.Release() // a closed connection is destroyed, not pooled
			t.conn = nil
		}
		if ctx.Err() != nil || time.Until(deadline) < delay {
			return err
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
	}
}

// end rolls the transaction back (a no-op after its commit) and returns the
// connection to the pool. It may be called more than once.
func (t *stepTx) end(ctx context.Context) {
	if t.tx != nil {
		// The connection is still ours (its Release comes below), so its
		// state is the transaction's, not another user's.
		t.connLost = t.connLost || t.tx.Conn().IsClosed()
		_ = t.tx.Rollback(ctx)
		t.tx = nil
	}
	if t.conn != nil {
		t.conn.Release()
		t.conn = nil
	}
}
