// Package record holds the records Tenure keeps about runs, as applications
// and operators read them: a run (Run, RunSummary, Progress, ChildRun,
// InFlight), its steps and attempts (Step, Attempt), its failures (Failure,
// FailureCount, and the groups and sets of FailureGroup, FailureSet), the
// worker registry (Worker, Orphans), the audit log and what requeues and
// purges chose (AuditEntry, RequeueCandidate, PurgeCandidate, Purged), the
// downstreams of flow control with their breakers' history (Downstream,
// BreakerChange, and, as the web UI shows them, UIDownstream and its
// changes), and how the database server replicates commits (Replication).
//
// It also holds their vocabulary: the statuses of runs, steps and attempts
// and the kinds of steps, one Go type each, whose constants are exactly the
// values the tables' CHECK constraints allow (RunStatuses, StepStatuses,
// StepKinds and AttemptStatuses list them; a test holds the lists and the
// constraints together). Failure reasons are policy.Reason, beside the
// policy that gives up.
//
// The types are plain data, with no behaviour beyond a few descriptions:
// package sdk returns a Run from Result, package runtime reports a
// Replication, and package operator and the web UI return the rest. The
// store scans its rows straight into them, so reading a record costs no
// conversion. Like River's rivertype, the package is a leaf: it imports only
// the standard library, github.com/google/uuid and packages policy and flow
// (leaves themselves), so any package can name its types.
//
// Times are the database's (timestamptz), durations are computed by the
// database's clock unless a field says otherwise, and a pointer field is nil
// when the event it times has not happened.
package record
