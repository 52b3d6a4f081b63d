// Command tenure is the operator CLI of Tenure: it migrates the schema, lists
// runs and failures and counts failures, shows a run (by ID or by the key it
// was started with) with its input, output, requeues and step and attempt
// timeline, sends a run a signal or cancels it, explains a step's retry
// policy, requeues failed runs (one, or by filter with a dry run) and
// applies retention. It reads the database from DATABASE_URL.
//
//	tenure migrate up
//	tenure failures list --since 24h
//	tenure failures stats --since 7d --bucket 1d
//	tenure runs show --key order-42
//	tenure runs show 0192c3e4-...
//	tenure runs signal 0192c3e4-... approve '{"by": "ada"}'
//	tenure failures requeue --activity charge --reason retries_exhausted --dry-run
//
// Tables are for people; --json gives the same data to scripts. Exit status:
// 0 success, 1 error, 2 usage error, 3 not found, 4 schema missing or too new.
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
