package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/internal/store"
)

// DefaultStatementTimeout is the deadline a client gives each statement it
// sends when the caller's context has no earlier one (see
// WithStatementTimeout). Tenure's statements take milliseconds; 30s leaves
// room for a busy server, or for an insert waiting on a key another
// transaction holds, and still turns a connection that silently stopped
// answering (a partition, a dead load balancer) into an error in bounded time.
const DefaultStatementTimeout = 30 * time.Second

// retryPauses are the pauses before the second, third and fourth (last) try
// of an insert whose outcome the client did not see, before jitter: 1.3s at
// most in all, enough for a connection pool to replace its connections after
// a failover or a restart.
var retryPauses = [...]time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond}

// insertTries is how many times the client sends such an insert at most.
const insertTries = len(retryPauses) + 1

// statementTimeout is the cause of a context ended by the client's statement
// timeout. It matches context.DeadlineExceeded.
type statementTimeout time.Duration

func (d statementTimeout) Error() string {
	return fmt.Sprintf("statement timeout %s", time.Duration(d))
}

func (statementTimeout) Unwrap() error { return context.DeadlineExceeded }

// bounded returns ctx with the client's statement deadline, unless ctx ends
// earlier.
func (c *Client) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, c.statementTimeout, statementTimeout(c.statementTimeout))
}

// timedOut names the statement timeout in err when that is what ended sctx
// (a context from bounded), so that the error says which deadline passed.
func timedOut(sctx context.Context, err error) error {
	var st statementTimeout
	if err != nil && errors.As(context.Cause(sctx), &st) && !errors.Is(err, st) {
		return fmt.Errorf("%w (%w)", err, st)
	}
	return err
}

// insertRetrying runs insert, a store insert on the pool, each time with the
// statement deadline, and runs it again when the database did not answer
// (see retryable): up to insertTries times, pausing between tries, while ctx
// lasts. The runs' IDs make a repeated insert idempotent (store.InsertRuns):
// a run the unseen try committed is not recorded twice and is reported
// created. When no try settled the outcome and one of them may have reached
// the database, the error wraps ErrOutcomeUnknown.
func (c *Client) insertRetrying(ctx context.Context, insert func(context.Context) ([]store.Inserted, error)) ([]store.Inserted, error) {
	unknown := false // some try may have committed
	var err error
	for try := 1; ; try++ {
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
			break
		}
		sctx, cancel := c.bounded(ctx)
		var out []store.Inserted
		out, err = insert(sctx)
		err = timedOut(sctx, err)
		cancel()
		if err == nil {
			return out, nil
		}
		if mayHaveCommitted(err) {
			unknown = true
		}
		if !retryable(err) || ctx.Err() != nil || try == insertTries {
			break
		}
		// Half of each pause is random, so that the clients a failover cut
		// off together do not all come back at once.
		pause := retryPauses[try-1]
		t := time.NewTimer(pause/2 + rand.N(pause/2))
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	if unknown {
		return nil, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return nil, err
}

// mayHaveCommitted reports whether an insert that failed with err may still
// have been recorded: unless the database answered with an error (the
// statement was rolled back), or the failure came before anything was sent
// (pgconn.SafeToRetry, or no connection could be made), the commit may have
// happened unseen.
func mayHaveCommitted(err error) bool {
	var pgErr *pgconn.PgError
	var connectErr *pgconn.ConnectError
	return !errors.As(err, &pgErr) && !errors.As(err, &connectErr) && !pgconn.SafeToRetry(err)
}

// retryable reports whether an insert that failed with err is worth sending
// again: the database did not answer (a lost or refused connection, EOF, a
// deadline passed), or it rolled the statement back for a reason of its own
// that a moment later may be gone (a connection, shutdown or start-up error,
// a deadlock or serialization failure). A statement the database refused
// for what it says (bad data, a constraint, a missing table) is not retried.
func retryable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false // the caller no longer waits
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case strings.HasPrefix(code, "08"): // connection_exception
			return true
		case strings.HasPrefix(code, "40"): // transaction_rollback: serialization failure, deadlock
			return true
		case code == "57P01", code == "57P02", code == "57P03": // shutdown, crash, starting up
			return true
		case code == "53300": // too_many_connections
			return true
		}
		return false
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) ||
		errors.As(err, &netErr) || errors.As(err, &connectErr)
}
