package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/store"
)

// Client is what an application uses to start runs and wait for them:
// Start, StartTx, StartMany, StartManyTx, Lookup, Result and Cancel. What an
// operator does (history, failures, requeue, retention) is package
// operator's. A Client is safe for concurrent use. Close it when done: it
// may hold a LISTEN connection and its goroutine.
type Client struct {
	store      *store.Store
	maxPayload int
	poll       time.Duration
	observer   StartObserver
	listenIdle time.Duration // how long the LISTEN connection outlives its last waiter
	// expectedWait bounds an expected run's first wait (see await).
	expectedWait time.Duration
	listen       *pgx.ConnConfig // the LISTEN connection's; nil: the pool's
	pollOnly     bool
	logger       *slog.Logger
	// statementTimeout bounds each statement the client sends (see bounded).
	statementTimeout time.Duration
	notices          notices
	starts           startBatch
	unserved         unserved
}

// ClientOption configures a Client.
type ClientOption func(*clientOptions)

type clientOptions struct {
	schema           string
	maxPayload       int
	poll             time.Duration
	observer         StartObserver
	statementTimeout time.Duration
	listen           *pgx.ConnConfig
	pollOnly         bool
	logger           *slog.Logger
}

// StartObserver is told of every run a client starts: the hook the otel
// package implements to give each run a trace.
type StartObserver interface {
	// RunStarting is called before the run is recorded. It returns the W3C
	// traceparent to store with the run ("" for none), which every execution
	// segment of the run continues, and a function called with Start's
	// outcome.
	RunStarting(ctx context.Context, workflow string) (traceparent string, done func(runID uuid.UUID, created bool, err error))
}

// WithStartObserver has the client report every Start to o (see the otel package).
func WithStartObserver(o StartObserver) ClientOption {
	return func(co *clientOptions) { co.observer = o }
}

// WithSchema names the schema Tenure's tables live in (default "tenure"). It
// must match the workers' and the migration's.
func WithSchema(name string) ClientOption { return func(o *clientOptions) { o.schema = name } }

// WithMaxPayload sets the largest input, in bytes of JSON, that Start accepts
// (default DefaultMaxPayload).
func WithMaxPayload(n int) ClientOption { return func(o *clientOptions) { o.maxPayload = n } }

// WithPollInterval sets how often Result re-reads a run when no notification
// arrives (default 1s): the fallback for a lost LISTEN connection, and the
// only way Result learns of a run's end with WithPollOnly. All of a
// client's waiting Result calls share one LISTEN connection, opened beside
// the pool for the first of them and kept open for a minute after the last
// (see Client.Close).
func WithPollInterval(d time.Duration) ClientOption { return func(o *clientOptions) { o.poll = d } }

// WithStatementTimeout sets the deadline of each statement the client sends
// (default DefaultStatementTimeout), applied when the caller's context has no
// earlier deadline: each try of the insert of Start and StartMany, each read
// of Result (not its wait, which lasts as long as its context), Lookup,
// Cancel, and the schema check. A statement that
// passes it fails with an error that names the timeout and matches
// context.DeadlineExceeded; Start and StartMany then try again (see Start).
// Statements on the caller's transaction (StartTx, StartManyTx) follow only
// the caller's context: the transaction is the caller's. d must be positive.
func WithStatementTimeout(d time.Duration) ClientOption {
	return func(o *clientOptions) { o.statementTimeout = d }
}

// WithListenConfig has Result LISTEN on connections made from cfg (from
// pgx.ParseConfig) instead of the pool's settings. A connection pooler in
// transaction mode (pgbouncer pool_mode=transaction, most hosted poolers)
// accepts LISTEN but delivers no notification: when the pool goes through
// one, give a direct connection to PostgreSQL here, or use WithPollOnly.
// Nothing but LISTEN uses it; see docs/operations.md, "Connection poolers".
func WithListenConfig(cfg *pgx.ConnConfig) ClientOption {
	return func(o *clientOptions) { o.listen = cfg }
}

// WithPollOnly turns LISTEN off: Result re-reads the run at the poll
// interval only (WithPollInterval), so it returns up to that long after the
// run ended, and the client opens no connection of its own. A client that
// listens checks once that its notifications arrive; when they do not, it
// logs why and falls back to polling by itself. WithPollOnly and
// WithListenConfig are exclusive.
func WithPollOnly() ClientOption { return func(o *clientOptions) { o.pollOnly = true } }

// WithLogger sets where the client logs its warnings: lost notifications,
// and notifications that do not arrive. Default slog.Default().
func WithLogger(l *slog.Logger) ClientOption { return func(o *clientOptions) { o.logger = l } }

// NewClient returns a client on pool, or the configuration error: a nil
// pool, an invalid schema name, a non-positive limit, interval or timeout,
// exclusive options. It sends nothing to the database: the schema is
// checked, once, by the first call that needs it.
func NewClient(pool *pgxpool.Pool, opts ...ClientOption) (*Client, error) {
	o := clientOptions{schema: store.DefaultSchema, maxPayload: DefaultMaxPayload, poll: time.Second,
		statementTimeout: DefaultStatementTimeout, logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	if pool == nil {
		return nil, errors.New("sdk.NewClient: nil pool")
	}
	st, err := store.New(pool, store.WithSchema(o.schema))
	switch {
	case err != nil:
		return nil, err
	case o.maxPayload <= 0 || o.poll <= 0 || o.statementTimeout <= 0:
		return nil, fmt.Errorf("sdk.NewClient: max payload (%d), poll interval (%s) and statement timeout (%s) must be positive",
			o.maxPayload, o.poll, o.statementTimeout)
	case o.pollOnly && o.listen != nil:
		return nil, errors.New("sdk.NewClient: WithPollOnly and WithListenConfig are exclusive: a poll-only client does not LISTEN")
	case o.logger == nil:
		return nil, errors.New("sdk.NewClient: nil logger")
	}
	c := &Client{store: st, maxPayload: o.maxPayload, poll: o.poll, observer: o.observer, listenIdle: listenIdle, expectedWait: expectedWait,
		statementTimeout: o.statementTimeout, listen: o.listen, pollOnly: o.pollOnly, logger: o.logger}
	c.starts.lockWait = flushLockWait
	return c, nil
}

// Close stops the client's listener (the LISTEN connection that Result
// waits on) and waits for it to end. The client must not be used after
// Close. Calling Close again, or on a nil client, does nothing.
func (c *Client) Close() {
	if c == nil {
		return
	}
	c.notices.close()
}

// errNilClient is what every call on a nil *Client returns.
var errNilClient = errors.New("sdk: nil *Client (use sdk.NewClient)")

// ready checks, once, the schema. Every entry point calls it before
// anything else touches c.
func (c *Client) ready(ctx context.Context) error {
	if c == nil {
		return errNilClient
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	return timedOut(ctx, c.store.Check(ctx))
}

// Cancel cancels a run. A run that has not started yet ends cancelled at
// once. A run that has started (running, or waiting for a sleep, a signal or
// a child) is marked for cancellation and Cancel returns: its worker
// cancels the running activity's context with ErrCancelled as the cause
// (the attempt is recorded cancelled), the workflow's next steps return
// errors wrapping ErrCancelled (unless it cleans up under Detached), and the
// run ends cancelled when the workflow returns; Result then returns
// ErrCancelled. A waiting run is woken for that, so it needs a live worker of
// its workflow. The run's unfinished children are cancelled in turn.
// Cancelling a finished run returns an error wrapping ErrFinished, an
// unknown one ErrNotFound. It is the same action as operator.Operator.Cancel
// and the SQL function cancel_run.
func (c *Client) Cancel(ctx context.Context, runID uuid.UUID) error {
	if err := c.ready(ctx); err != nil {
		return err
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	_, err := c.store.CancelRun(ctx, runID)
	return timedOut(ctx, err)
}

// Send sends the signal name with payload (encoded as JSON) to run runID,
// for the workflow's Receive. It is committed when Send returns; a run
// waiting for a signal of that name wakes at once. Signals are kept until
// received, each received once, in the order sent per name. Sending to a
// run that ended returns an error wrapping ErrFinished, to an unknown one
// ErrNotFound. Send is not retried after an unseen commit: a signal is not
// idempotent (make the payload carry an ID when a repeat must be detected).
func (c *Client) Send(ctx context.Context, runID uuid.UUID, name string, payload any) error {
	if err := c.ready(ctx); err != nil {
		return err
	}
	b, err := c.signalPayload("sdk.Send", name, payload)
	if err != nil {
		return err
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	_, err = c.store.SendSignal(ctx, c.store.Pool(), runID, name, b)
	return timedOut(ctx, err)
}

// SendTx sends a signal inside the caller's transaction tx, as Send does:
// the signal exists, and wakes the run, if and only if tx commits.
func (c *Client) SendTx(ctx context.Context, tx pgx.Tx, runID uuid.UUID, name string, payload any) error {
	if err := c.ready(ctx); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("sdk.SendTx: nil transaction")
	}
	b, err := c.signalPayload("sdk.SendTx", name, payload)
	if err != nil {
		return err
	}
	_, err = c.store.SendSignal(ctx, tx, runID, name, b)
	return err
}

// signalPayload encodes a signal's payload, within the client's payload
// limit. caller is the entry point, named in the errors.
func (c *Client) signalPayload(caller, name string, payload any) ([]byte, error) {
	if err := checkName(caller, "signal name", name); err != nil {
		return nil, err
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("%s(%q): encode payload: %w", caller, name, err)
	}
	if len(b) > c.maxPayload {
		return nil, fmt.Errorf("%s(%q): payload is %d bytes of JSON, limit %d: %w", caller, name, len(b), c.maxPayload, ErrPayloadTooLarge)
	}
	return b, nil
}

// GetEvent returns the value of run runID's event key (set by the
// workflow's SetEvent), decoded into T, waiting up to timeout for it to be
// set (0: only read). It wakes on the event's notice and re-reads at the
// client's poll interval. When the event is not set in time it returns a
// *TimeoutError (errors.Is(err, ErrTimeout)); when the run ended without
// setting it, an error wrapping ErrFinished; for an unknown run, ErrNotFound.
func GetEvent[T any](ctx context.Context, c *Client, runID uuid.UUID, key string, timeout time.Duration) (T, error) {
	var v T
	if err := c.ready(ctx); err != nil {
		return v, err
	}
	if err := checkName("sdk.GetEvent", "event key", key); err != nil {
		return v, err
	}
	if timeout < 0 {
		return v, fmt.Errorf("sdk.GetEvent(%q): negative timeout %s", key, timeout)
	}
	var e store.Event
	read := func() (bool, error) {
		sctx, cancel := c.bounded(ctx)
		defer cancel()
		var err error
		e, err = c.store.GetEvent(sctx, runID, key)
		return err == nil && (e.Found || e.RunStatus.Terminal()), timedOut(sctx, err)
	}
	var err error
	if timeout == 0 {
		_, err = read() // only read
	} else {
		err = c.await(ctx, runID, timeout, false, read)
	}
	switch {
	case errors.Is(err, errAwaitTimeout) || (err == nil && !e.Found && !e.RunStatus.Terminal()):
		return v, &TimeoutError{What: fmt.Sprintf("event %q of run %s", key, runID), Timeout: timeout}
	case err != nil:
		return v, err
	case !e.Found:
		return v, fmt.Errorf("event %q of run %s: the run is %s and never set it: %w", key, runID, e.RunStatus, ErrFinished)
	}
	if err := json.Unmarshal(e.Value, &v); err != nil {
		return v, fmt.Errorf("event %q of run %s: decode into %T: %w", key, runID, v, err)
	}
	return v, nil
}
