package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/store"
)

// Operator runs the operator's actions on one schema of one database. It is
// safe for concurrent use and holds nothing but the pool it was given.
type Operator struct {
	store   *store.Store
	timeout time.Duration
}

// Option configures an Operator.
type Option func(*options)

type options struct {
	schema  string
	timeout time.Duration
}

// DefaultStatementTimeout is the statement deadline of an Operator made
// without WithStatementTimeout.
const DefaultStatementTimeout = 30 * time.Second

// WithStatementTimeout sets the deadline of each action that is one statement
// (every action but RequeueFailures, PurgeCompleted and PurgeFailures, which
// work in batches for as long as their context lasts), applied when the
// caller's context has no earlier deadline (default
// DefaultStatementTimeout), so that an unreachable database cannot hold a
// caller. d must be positive.
func WithStatementTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithSchema names the schema Tenure's tables live in (default
// store.DefaultSchema). It must be the one the workers and the migration use.
func WithSchema(name string) Option { return func(o *options) { o.schema = name } }

// New returns an Operator on pool. It returns the configuration error (a nil
// pool, an invalid schema name) at once and sends nothing to the database:
// the schema is checked by the first action.
func New(pool *pgxpool.Pool, opts ...Option) (*Operator, error) {
	o := options{schema: store.DefaultSchema, timeout: DefaultStatementTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if pool == nil {
		return nil, errors.New("operator.New: nil pool")
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("operator.New: statement timeout %s must be positive", o.timeout)
	}
	st, err := store.New(pool, store.WithSchema(o.schema))
	if err != nil {
		return nil, err
	}
	return &Operator{store: st, timeout: o.timeout}, nil
}

// ErrNotFound is returned for a run that does not exist (by ID or key).
var ErrNotFound = store.ErrNotFound

// ErrNotFailed is returned by Requeue for a run that is not failed.
var ErrNotFailed = store.ErrNotFailed

// ErrFinished is returned by Cancel for a run that already ended.
var ErrFinished = store.ErrFinished

// ErrNoFilter is returned by RequeueFailures for a filter that sets nothing:
// requeueing every open failure must be asked for with RequeueFilter.All.
var ErrNoFilter = store.ErrNoFilter

// ready checks, once, that the schema is at the version this code knows.
func (op *Operator) ready(ctx context.Context) error {
	if op == nil {
		return errors.New("operator: nil *Operator (use operator.New)")
	}
	// Bounded even for the batched actions: the check is one statement.
	cctx, cancel := context.WithTimeout(ctx, op.timeout)
	defer cancel()
	return op.store.Check(cctx)
}

// bounded is ctx with the statement deadline, unless ctx ends earlier.
func (op *Operator) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if op == nil { // ready reports the nil *Operator
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, op.timeout)
}
