package operator

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/store"
)

// Operator runs the operator's actions on one schema of one database. It is
// safe for concurrent use and holds nothing but the pool it was given.
type Operator struct {
	store *store.Store
}

// Option configures an Operator.
type Option func(*options)

type options struct {
	schema string
}

// WithSchema names the schema Tenure's tables live in (default
// store.DefaultSchema). It must be the one the workers and the migration use.
func WithSchema(name string) Option { return func(o *options) { o.schema = name } }

// New returns an Operator on pool. It returns the configuration error (a nil
// pool, an invalid schema name) at once and sends nothing to the database:
// the schema is checked by the first action.
func New(pool *pgxpool.Pool, opts ...Option) (*Operator, error) {
	o := options{schema: store.DefaultSchema}
	for _, opt := range opts {
		opt(&o)
	}
	if pool == nil {
		return nil, errors.New("operator.New: nil pool")
	}
	st, err := store.New(pool, store.WithSchema(o.schema))
	if err != nil {
		return nil, err
	}
	return &Operator{store: st}, nil
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
	return op.store.Check(ctx)
}
