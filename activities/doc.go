// Package activities declares activities: the Go functions of a workflow that
// do side effects (charge a card, send an e-mail, write a row), each with a
// default retry policy.
//
// An activity is declared once, at package level, with New (or NewTx for one
// that writes to the same Postgres database), and called from a workflow with
// sdk.Execute. Each call is a step of the run; each invocation of the function
// for that step is an attempt. The runtime records every attempt before it
// invokes the function, so when a worker dies mid-attempt the next worker
// knows the outcome is unknown and charges the rescue budget, not the retry
// budget (see the policy package).
//
// What an activity sees at run time comes from its context: Info (run, step,
// attempt, whether this attempt is a rescue) and IdempotencyKey, which is the
// same for every attempt of a step, so that remote systems can deduplicate.
package activities
