// Package store manages Tenure's schema: the tables, functions and views
// that hold runs, steps, attempts, failures and the audit log.
//
// Run Migrate once at start-up, from every process if that is simpler: it is
// idempotent, takes an advisory lock so that concurrent migrators wait for
// each other, applies every missing migration in one transaction and refuses
// to touch a schema that a newer Tenure migrated (ErrSchemaTooNew). Status
// lists the migrations this binary carries and which are applied; the CLI's
// `tenure migrate up` and `tenure migrate status` do the same.
//
// MigrationScript returns, without applying it, the Script that Migrate
// would run (ScriptFrom, the one from a given version, reads no database):
// its SQL method writes the very statements Migrate runs as one
// transaction, for a DBA to review or to apply with psql or another
// migration tool (`tenure migrate up --print-sql`). The script checks, under
// the lock, that the schema is still at the version it was made for.
//
// All tables live in one schema, DefaultSchema unless WithSchema names
// another; clients, workers and operators name the same one (sdk.WithSchema,
// runtime.Config.Schema, operator.WithSchema). Migrations need DDL rights;
// workers and clients need only DML (docs/operations.md, "Grants").
//
// This package holds no statement of the worker or the client: applications
// start runs with package sdk, workers run them with package runtime, and
// operators inspect, requeue and purge them with package operator.
package store
