// Command tenure is the operator CLI of Tenure: it migrates the schema (or
// prints the SQL of a migration), starts a run of a workflow by its name,
// lists and counts runs and failures, shows a run (by ID or by the key it
// was started with) with its input, output, requeues and step and attempt
// timeline, waits for a run's result, sends a run a signal, cancels it or
// deletes it, explains a step's retry policy, requeues failed runs (by ID,
// key or filter, with a dry run), shows and changes the limits of flow
// control and opens and closes breakers by hand, and applies retention. It
// reads the database from DATABASE_URL.
//
//	tenure migrate up
//	tenure failures list --since 24h
//	tenure failures stats --since 7d --bucket 1d
//	tenure runs start place-order '{"order_id": 42}' --key order-42
//	tenure runs result --key order-42 --follow
//	tenure runs show --key order-42
//	tenure runs show 0192c3e4-...
//	tenure runs signal 0192c3e4-... approve '{"by": "ada"}'
//	tenure failures requeue --activity charge --reason retries_exhausted --dry-run
//	tenure limits set payments --concurrency 5 --note "INC-7"
//	tenure breaker open payments --note "INC-9"
//
// Tables are for people; --json gives the same data to scripts. A list
// stops at --limit rows and then says so on stderr, with the --after cursor
// of the next page; --all lists every page. Exit status: 0 success, 1 error,
// 2 usage error, 3 not found (a run, a step, a downstream), 4 schema
// missing or too new, 5 the run failed or was cancelled (runs result).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
