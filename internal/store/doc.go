// Package store holds every SQL statement Tenure runs, behind a typed API,
// and the migration runner. It is internal: workers (runtime,
// internal/committer), clients (sdk) and the test kit use it directly; users
// reach it through the public packages, which wrap or alias what they need:
// store (the schema: Migrate, Status) and operator (runs, failures, requeue,
// retention, the audit log).
//
// Nothing else in Tenure contains SQL. Each statement's comment names the
// invariant it protects. The invariants that matter most:
//
//   - Lease times are computed by the database clock (now()); no statement takes
//     a time from a worker.
//   - Every write a worker makes for a run is fenced: it carries the run's lease
//     epoch and touches no row when the lease has moved on. Callers check the
//     result and treat "no row" as ErrLeaseLost, never as success.
//   - A run that fails gets its failure row in the same statement, and so the
//     same transaction, that marks it failed.
//   - Failure rows are never deleted by the runtime or by a cap. Only an
//     operator's explicit retention call (operator.PurgeFailures, the SQL function
//     purge_failures or `tenure purge`) deletes them, and every deletion is
//     counted in the audit log.
//
// All tables live in one schema (DefaultSchema unless WithSchema says
// otherwise). A Store checks once that the schema exists and is at the version
// this code knows, and answers ErrSchemaMissing with the fix ("run
// migrations") instead of a raw SQL error.
package store
