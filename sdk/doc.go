// Package sdk is what application code imports to write durable workflows on
// PostgreSQL and to start, wait for and cancel their runs (requeueing is an
// operator's action: package operator).
//
// A workflow is an ordinary Go function. The activities it calls through
// [Execute] do the side effects; each call is checkpointed in Postgres, so a
// run survives crashes, deploys and network partitions: another worker
// continues it from its last checkpoint. Every attempt is a row, retries and
// crash recovery have separate budgets, and a run that exhausts them lands in
// a failure table that people query and requeue with SQL.
//
// # Workflows and activities
//
// An activity is declared once, at package level, with [activities.New] (or
// [activities.NewTx], below) and its default retry policy; a workflow with
// [NewWorkflow]. Both take a function func(ctx context.Context, in In) (Out,
// error); inputs and outputs are stored as JSON, so they must survive
// encoding/json.
//
//	var Charge = activities.New("charge",
//		func(ctx context.Context, in ChargeIn) (Receipt, error) {
//			return payments.Charge(ctx, in, activities.IdempotencyKey(ctx))
//		},
//		policy.MaxAttempts(5),
//		policy.Exponential(time.Second, 2, time.Minute),
//	)
//
//	var PlaceOrder = sdk.NewWorkflow("place-order",
//		func(ctx context.Context, in OrderIn) (Receipt, error) {
//			return sdk.Execute(ctx, Charge, ChargeIn{Amount: in.Amount})
//		})
//
// The names are recorded with every run, step and attempt, and are what
// workers match runs with: keep them stable across deploys. Declarations
// check themselves: a bad policy, an empty name or a nil function panics at
// start-up, not in the middle of a run.
//
// One execution of a workflow with one input is a run. It has one ID for its
// whole life, across retries, crashes and requeues. Each call of an activity
// in a run is a step (1, 2, 3 … in call order); each invocation of the
// activity function for a step is an attempt (1, 2, 3 … per step).
//
// # Execute and checkpoints
//
// [Execute] runs an activity as the next step of the current run and returns
// its output. The worker commits each attempt's row before it invokes the
// function, and checkpoints the step's output once it returns, for every
// later execution of the run to find (an at-least-once step's checkpoint
// rides with the run's next write: a crash in between reruns the step, as a
// rescue; see [Guarantees]). When an attempt returns
// an error, the step's policy decides: another attempt after a delay, or the
// step gives up and Execute returns an [*ActivityError]. Options passed to
// Execute override the activity's defaults for that call (call option >
// activity default > worker default > package default); an invalid one is
// returned as a *policy.ValidationError before anything runs. Called outside
// a run, Execute returns an error wrapping [ErrNotInWorkflow].
//
// An activity learns about its attempt from its context:
// [activities.InfoFrom] gives the run, step, attempt and budgets spent, and
// [activities.IdempotencyKey] the step's key ("<run id>/<step>"), the same for
// every attempt of the step, for remote systems that deduplicate.
//
// # Replay and determinism
//
// A run resumes (on another worker after a crash, after a durable delay, or
// after a requeue) by calling the workflow function again from the top. Each
// Execute of a step that completed returns its recorded output without
// invoking the activity; a step that gave up returns its recorded error; the
// first step with no outcome continues from its recorded history, budgets
// included. For that to work, workflow code must make the same calls to
// activities, in the same order, given its input and the results of earlier
// steps: do side effects, clock reads, random numbers and configuration in
// activities (or with [Now] and [SideEffect], below), not in the workflow
// function; call Execute from the workflow's goroutine only; sort map keys
// before looping over them.
//
// Tenure checks what it can: a step whose recorded activity differs from the
// one now called fails the run with reason nondeterminism. A retry delay
// longer than the worker's MaxInProcessSleep suspends the run durably and
// unwinds the workflow goroutine with runtime.Goexit, which workflow code
// cannot recover from; deferred functions in workflow code may therefore run
// more than once over the life of a run.
//
// # Two budgets: retries and rescues
//
// An attempt that returns an error has a known outcome: another attempt is a
// retry, charged to [policy.MaxAttempts] (default 3). An attempt whose worker
// died, froze or was cut off while it ran has an unknown outcome: it is
// recorded lost when another worker takes over the expired lease, and the
// next attempt is a rescue, charged to [policy.MaxRescues] (default 3). The two
// budgets never share a counter: a flaky API cannot spend the crash budget,
// and an input that kills every worker that runs it (a poison pill) is
// quarantined with reason rescues_exhausted instead of crashing the fleet.
// An attempt cut short by a graceful shutdown is recorded interrupted and
// charged to neither. [WithMaxRescues] is the backstop for crashes outside
// activities, in workflow code or in Tenure itself.
//
// An error wrapped with [policy.Permanent] is never retried; per-error-type
// policies, Retry-After hints, per-attempt timeouts and step deadlines are in
// package [policy].
//
// # At most once
//
// [policy.AtMostOnce] declares an activity that must not run again when
// nobody knows whether it ran, such as a payment without an idempotency key.
// Its attempt row is committed before the function is invoked; if that
// attempt is later found lost, the function is not invoked again and the
// step gives up with [ErrIndeterminate]. The workflow may handle it, for
// example by asking the remote system what happened:
//
//	receipt, err := sdk.Execute(ctx, Charge, in)
//	if errors.Is(err, sdk.ErrIndeterminate) {
//		receipt, err = sdk.Execute(ctx, FindCharge, in.OrderID) // ask, don't charge
//	}
//
// Unhandled, the run fails with reason indeterminate. Retries after returned
// errors still follow MaxAttempts: a function that returns an error asserts
// that its effect did not happen.
//
// # Transactional activities
//
// An activity declared with [activities.NewTx] receives the pgx.Tx in which
// its step's result is checkpointed: its writes to the same database commit
// together with the checkpoint, exactly once, fenced by the run's lease. It
// is never indeterminate (a lost attempt's transaction never committed, so
// it is run again, charged to MaxRescues), and AtMostOnce does not apply to
// it. Inserting a River job in such an activity hands work to River exactly
// once.
//
// # Starting runs
//
// A [Client] starts and inspects runs; create it once with [NewClient] and
// share it. [Start] records a run and returns its [Run] handle once the run
// is committed; any worker that registered the workflow picks it up.
// [StartTx] records it in the caller's pgx.Tx instead, so that the run
// exists if and only if that transaction commits: a row you write and the
// workflow that processes it cannot part ways. [StartMany] and [StartManyTx]
// record many runs with one statement. [WithQueue], [WithPriority] and
// [WithDelay] say where and when a run is due. [WithFairness] shares a queue
// between tenants (or any other key) by weight, whatever each one's backlog
// (docs/fairness.md).
//
// [WithKey] makes a start idempotent: a second start with the same key and
// the same input (compared as JSON values) returns the existing run, with
// Run.Created false. The same key with another input is a mistake that Start
// refuses with [ErrKeyConflict], naming the key and the run that holds it;
// a key held by a run of another workflow gives [ErrWorkflowMismatch].
//
// Start survives a connection lost during its insert: it sends the insert
// again, and the run's ID, made by the client, makes the retry record one run
// per call. When no try settles the outcome, the error wraps
// [ErrOutcomeUnknown] and names the run's ID; [Lookup] finds the run if it
// exists, and with a key, starting again with the key is the safe way to
// find out.
//
// # Waiting for a result
//
// [Run.Result] waits until the run ends, woken by LISTEN/NOTIFY with a
// polling fallback ([WithPollInterval]). It returns the workflow's output; for
// a failed run, a [*RunError] carrying the failure row's reason, step,
// activity and last error; for a cancelled run, an error wrapping
// [ErrCancelled]; ctx's error when ctx ends first, the run going on. [Lookup]
// gives a handle on an existing run by its ID, for example to wait for it in
// another process. Every attempt of a run, and the failure table, are read
// with package operator (operator.Operator's History and Failures).
//
// # Durable primitives
//
// Besides activities, a workflow may wait and coordinate with durable
// primitives. Each is a step of its own kind (a [record.StepKind]), recorded once
// and replayed from its record, never done again: not after a crash, a
// suspension or a requeue.
//
//   - [Sleep] and [SleepUntil] pause the workflow; the due time is fixed by
//     the database clock when the step first runs. A sleep longer than the
//     worker's MaxInProcessSleep releases the lease until it is due.
//   - [Receive] waits, with an optional timeout ([ErrTimeout]), for a signal
//     sent with [Client.Send] or [Client.SendTx]. Signals are kept until
//     received, and each is received once, in the order sent per name.
//   - [SetEvent] publishes a value (progress, an intermediate result) that
//     [GetEvent] reads from outside the run, waiting for it if need be.
//   - [Now] and [SideEffect] record a time and a value made in workflow code,
//     so that a replay sees the same.
//   - [StartChild] and [Call] start child workflows; [Child.Result] waits for
//     one and returns its output or a [*ChildError]. A replay never starts a
//     second child.
//
// A run that waits for a long sleep, a signal or a child holds no lease and
// no worker slot: it is queued, runs.waiting_for saying what for, and what
// it waits for wakes it. The step_timeline view shows every step of a run,
// whatever its kind. See [Semantics] for what each does on replay and after
// a requeue.
//
// # Cancel and requeue
//
// [Client.Cancel] cancels a run. One that has not started ends cancelled at
// once. For one that has started, Cancel returns once the cancellation is
// requested, not once the run ended: the worker running it cancels the
// workflow's context with cause [ErrCancelled], which cancels the running
// activity's context; its attempt is recorded cancelled (charged to no
// budget) and the step gives up with [ReasonCancelled], an [*ActivityError]
// matching ErrCancelled. Every later step returns an error wrapping
// ErrCancelled, unless it is called with a context from [Detached], which is
// how a workflow runs its cleanup:
//
//	receipt, err := sdk.Execute(ctx, Charge, in)
//	if errors.Is(err, sdk.ErrCancelled) {
//		_, _ = sdk.Execute(sdk.Detached(ctx), FindCharge, in.OrderID) // clean up
//		return receipt, err
//	}
//
// The run ends cancelled when the workflow returns an error, and [Run.Result]
// then returns ErrCancelled; its unfinished children are cancelled in turn.
// A parent that completes or fails leaves its children running. No lease is
// lost: the worker keeps the run until it ended it.
//
// Requeueing is an operator's action (package operator, Operator.Requeue and
// RequeueFailures, with a note for the audit log): it puts a failed run back
// in the queue: the run keeps its ID
// and its history, completed steps are replayed rather than rerun, the step
// that failed gets a fresh budget, and the failure row is marked requeued
// and kept. The policy is the one the code declares now: deploy the fix
// first, then requeue. Requeueing a run that failed as indeterminate invokes
// the at-most-once activity again; do it once you know its effect did not
// happen. The CLI (tenure failures requeue) and the SQL functions
// requeue_run and requeue_failures do the same.
//
// # Errors a workflow sees
//
// Execute returns an [*ActivityError] when a step gives up. Its Reason says
// why: [ReasonRetriesExhausted], [ReasonRescuesExhausted],
// [ReasonNonRetryable] (a permanent error, or RetryIf said no),
// [ReasonIndeterminate] (errors.Is(err, ErrIndeterminate) is true),
// [ReasonDeadline] or [ReasonPanic]; Step, Activity, and the last error's
// Message and Go Type say where and what. The workflow may handle it and go
// on; a workflow that returns it (or an error wrapping it) fails the run
// with the step's reason. Any other error the workflow returns fails the run
// with reason [ReasonWorkflowError]; a panic in the workflow, with
// [ReasonPanic]; an input that does not decode, with [ReasonBadInput].
//
// A replayed step returns the same *ActivityError, with one difference: Err,
// the last attempt's error value, only exists in the process where the step
// gave up. For error types a workflow branches on with errors.As, register
// them with [WithErrorType]: they are stored as JSON and decoded on replay,
// so the workflow takes the same branch in every execution.
//
// # Workers
//
// Runs are executed by workers, from package
// github.com/tenurehq/tenure/runtime: [runtime.NewWorker] on a pool, Register
// the workflows, then [runtime.Worker.Start], which returns start-up errors
// (a schema that was never migrated, no connection) and runs the worker in
// the background until ctx ends or [runtime.Worker.Shutdown] drains it. Workers may run
// in the same process as the client or in others; any worker that registered
// a run's workflow may continue it. The schema comes from store.Migrate (package github.com/tenurehq/tenure/store)
// (or tenure migrate up); [WithSchema] and runtime.Config.Schema name another
// than "tenure".
//
// # Testing
//
// Package github.com/tenurehq/tenure/tenuretest gives each test a Tenure of
// its own on a real PostgreSQL (a migrated schema, a pool, a client and a
// worker), replaces activities' functions without changing the workflow,
// simulates a crash in the middle of an attempt, and asserts how a run ended:
// see [tenuretest.New] and the [testing guide].
//
// # Further reading
//
//   - [Getting started]: from nothing to a running workflow.
//   - [Semantics]: retry, rescue and interrupted, at-most-once, leases and
//     fencing, determinism, the durable primitives, cancellation, requeue.
//   - [Guarantees]: what Tenure promises when things fail, and the tests
//     that prove it.
//   - [SQL reference] and [Operations]: what on-call needs.
//
// [record.StepKind]: https://pkg.go.dev/github.com/tenurehq/tenure/record#StepKind
// [runtime.NewWorker]: https://pkg.go.dev/github.com/tenurehq/tenure/runtime#NewWorker
// [runtime.Worker.Start]: https://pkg.go.dev/github.com/tenurehq/tenure/runtime#Worker.Start
// [runtime.Worker.Shutdown]: https://pkg.go.dev/github.com/tenurehq/tenure/runtime#Worker.Shutdown
// [tenuretest.New]: https://pkg.go.dev/github.com/tenurehq/tenure/tenuretest#New
// [testing guide]: https://github.com/tenurehq/tenure/blob/main/docs/testing.md
// [Getting started]: https://github.com/tenurehq/tenure/blob/main/docs/getting-started.md
// [Semantics]: https://github.com/tenurehq/tenure/blob/main/docs/semantics.md
// [Guarantees]: https://github.com/tenurehq/tenure/blob/main/docs/guarantees.md
// [SQL reference]: https://github.com/tenurehq/tenure/blob/main/docs/sql.md
// [Operations]: https://github.com/tenurehq/tenure/blob/main/docs/operations.md
package sdk
