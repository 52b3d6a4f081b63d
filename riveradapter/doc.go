// Package riveradapter gives River jobs Tenure's failure handling: a
// policy.Retry per job kind (backoff shapes, jitter, per-error rules,
// permanent errors, Retry-After hints) decides each failed attempt of a
// River job, where River's own retry policy only sees the error's text;
// with Record, every attempt is a Tenure attempt row, crashes are charged
// to a rescue budget of their own, and jobs given up are rows of Tenure's
// failure table, shown and requeued with a fresh budget in SQL, the CLI
// and the UI (docs/river.md; docs/design/river-adapter.md says why).
//
// It is a module of its own, so that Tenure's core module never requires
// River.
//
// What it does with a failed attempt of a kind it has a policy for:
//
//   - retry: the error goes back to River, and River schedules the next
//     attempt at the policy's delay (the Retry as River's ClientRetryPolicy
//     reads the decision the middleware made);
//   - a Retry-After hint on the error (policy.WithRetryAfter): the job is
//     snoozed for the hint, clamped by the policy's MaxRetryAfter, which
//     River does not count as an attempt;
//   - give up (a permanent error, a rule's RetryIf, MaxAttempts spent, a
//     deadline): the job is cancelled (river.JobCancel), with the reason in
//     its error, whatever the job's own MaxAttempts says.
//
// A panic of a job of such a kind is an error to the policy, its text the
// panic's value and stack (River records it with the attempt's error);
// River's ErrorHandler.HandlePanic is not called for it.
//
// Kinds without a policy are left to River's retry policy as it was (with
// Record, their attempts are recorded too). River counts attempts when it
// fetches a job: without Record, an attempt lost to a crash is charged
// like an error; with it, the policy counts Tenure's rows, errors against
// MaxAttempts and lost attempts against MaxRescues.
//
// With Record, the Retry also:
//
//   - writes an attempt's start before the job runs, closing as lost an
//     attempt of the job still running (River's rescuer put it back), and
//     cancels, before it runs, a job whose lost attempts passed MaxRescues
//     (rescues_exhausted);
//   - writes the attempt's end after it, with its status, error, delay and
//     source, failing the job's run with a failure row when the policy
//     gives up;
//   - with Reconcile or RunReconciler, records what River ends by itself
//     (Client.JobCancel, a discard at River's MaxAttempts, a deletion) and
//     puts back in River the jobs whose runs were requeued in Tenure.
package riveradapter
