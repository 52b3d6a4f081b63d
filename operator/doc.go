// Package operator is what a person (or a script, the CLI, the web UI)
// uses to look after Tenure's runs: find a run by ID or key, read its steps
// and the timeline of its attempts, list what failed, why and since when,
// put failed runs back in the queue, cancel runs, apply retention, look
// after the downstreams of flow control (their limits and breakers), and
// read the audit log of it all.
//
// An Operator works on one schema of one database:
//
//	op, err := operator.New(pool, operator.WithSchema("tenure"))
//
// Its actions are the ones the CLI runs (`tenure failures list`, `tenure
// failures requeue`, `tenure runs show`, `tenure runs start`, `tenure runs
// delete`, `tenure purge`, `tenure audit`, `tenure limits`, `tenure
// breaker`). Requeue, RequeueFailures, DeleteRun, the purges and the
// changes of flow control are SQL functions of the schema (requeue_run,
// requeue_failures, delete_run, purge_completed, purge_failures,
// set_downstream, reset_downstream, open_breaker, close_breaker), the one
// implementation for Go, the CLI and psql, and each writes an audit_log row
// with the database role and the note given.
//
// Downstreams and Downstream read the downstreams of package flow as they
// stand: the limits in force and those declared, what is in use and
// waiting, the breaker and the counters. SetLimits changes limits at run
// time (a LimitsChange says which), ResetLimits gives them back to the
// declaration, OpenBreaker and CloseBreaker move a breaker by hand, and
// BreakerHistory lists a breaker's changes. Start records a run by its
// workflow's name, for a caller that does not link the workflow's code.
//
// The rows it returns are package record's (record.Run, record.Step,
// record.Attempt, record.Failure, ...), with their vocabulary
// (record.RunStatus, record.StepStatus, record.AttemptStatus; failure
// reasons are policy.Reason); what it takes, filters and options
// (RunFilter, FailureFilter, RequeueOptions, ...), is its own. Applications start runs
// and wait for them with sdk.Client, whose Cancel is the same as
// Operator.Cancel; the schema is managed with package store.
//
// Every action checks, once per Operator, that the schema is at the version
// this code knows (store.ErrSchemaMissing, store.ErrSchemaTooNew otherwise).
// Each one-statement action has a deadline (WithStatementTimeout, default
// DefaultStatementTimeout); RequeueFailures and the purges work in batches
// for as long as the caller's context lasts.
package operator
