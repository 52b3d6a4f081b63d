// Package sdk is what application code imports: it declares workflows
// (NewWorkflow), runs their steps durably (Execute), and starts runs and
// waits for them through a Client (Start, StartTx, StartMany, StartManyTx,
// Lookup, Run.Result, Client.Cancel).
//
// A Client is made once per process with NewClient, which returns any
// configuration error at once. Workers that execute the runs are package
// runtime's; what an operator does (attempt history, failures, requeue,
// retention, the audit log) is package operator's; the schema is migrated
// with package store.
//
// The vocabulary of runs, steps, attempts and failures (RunStatus,
// StepStatus, AttemptStatus, Reason) is defined here for every package.
package sdk
