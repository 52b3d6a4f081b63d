package store

import (
	"github.com/tenurehq/tenure/internal/store"
)

// DefaultSchema is the schema Tenure's tables live in unless WithSchema names another.
const DefaultSchema = store.DefaultSchema

// Option configures Migrate, Status, MigrationScript and ScriptFrom.
type Option func(*options)

// options are what the Options set: the schema, when one names it.
type options struct {
	schema string
	named  bool
}

// WithSchema puts Tenure's tables in the named schema instead of DefaultSchema.
// The name must be a lower-case SQL identifier (letters, digits, underscore):
// ValidateSchema says whether it is.
func WithSchema(name string) Option {
	return func(o *options) { o.schema, o.named = name, true }
}

// internal turns opts into the internal store's options: the last
// WithSchema wins, as it does there.
func internal(opts []Option) []store.Option {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if !o.named {
		return nil
	}
	return []store.Option{store.WithSchema(o.schema)}
}

// ValidateSchema reports whether name can be used as Tenure's schema name:
// nil for a lower-case SQL identifier, else an error saying why not.
func ValidateSchema(name string) error { return store.ValidateSchema(name) }

// ErrSchemaMissing is returned by every entry point of Tenure (Start, a
// worker's Run, an operator's actions) when Tenure's tables are not there,
// or not at the version the code needs: run Migrate or `tenure migrate up`
// first.
var ErrSchemaMissing = store.ErrSchemaMissing

// ErrSchemaTooNew is returned when the schema was migrated by a newer Tenure
// than this binary knows: upgrade the binary instead of running it.
var ErrSchemaTooNew = store.ErrSchemaTooNew

// ErrTransactionPooler is returned (wrapping PostgreSQL's error) when a
// statement fails because pgx's prepared statements met a connection pooler
// in transaction mode, such as pgbouncer with pool_mode=transaction. The fix
// is in the database URL: default_query_exec_mode=cache_describe or exec
// (docs/operations.md, "Connection poolers").
var ErrTransactionPooler = store.ErrTransactionPooler
