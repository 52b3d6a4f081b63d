package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// Exit statuses, documented in the root command's help.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
	exitSchema   = 4
	// exitRunFailed is tenure runs result's for a run that failed or was
	// cancelled.
	exitRunFailed = 5
)

const exitHelp = `Exit status:
  0  success
  1  error (database unreachable, run not in the right state, ...)
  2  usage error (unknown command or flag, bad argument, DATABASE_URL not set)
  3  not found (no such run, step or downstream)
  4  schema missing or newer than this binary: run "tenure migrate up",
     or upgrade tenure
  5  the run failed or was cancelled (tenure runs result)`

// usageError is a mistake on the command line: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// message is err as run prints it after its one "tenure: ": without the
// prefixes that messages of the library carry already, and without the
// lines pgx repeats (a connection error lists every attempt, and with
// sslmode=prefer the TLS and the plain attempt fail alike).
func message(err error) string {
	msg := err.Error()
	for {
		rest, ok := strings.CutPrefix(msg, "tenure: ")
		if !ok {
			break
		}
		msg = rest
	}
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		if !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// atLeastOne rejects a count flag below 1: 0 and negatives would otherwise
// reach the store, which reads them as its default.
func atLeastOne(flag string, n int) error {
	if n < 1 {
		return usagef("--%s must be at least 1, got %d", flag, n)
	}
	return nil
}

// schemaError is a store.ErrSchemaMissing that names, instead, the schemas
// where Tenure's tables are.
type schemaError struct {
	msg string
	err error
}

func (e schemaError) Error() string { return e.msg }
func (e schemaError) Unwrap() error { return e.err }

// schemaHint explains a store.ErrSchemaMissing for a --schema that holds no
// Tenure tables by naming the schemas that do: the demo writes to
// tenure_demo, and an application may use a schema of its own. Any other
// error, or one for a schema that exists at an older version, is returned
// as it is.
func (a *app) schemaHint(err error) error {
	if !errors.Is(err, store.ErrSchemaMissing) || a.op == nil {
		return err
	}
	schemas, lerr := a.op.Schemas(a.ctx)
	if lerr != nil || slices.Contains(schemas, a.schema) {
		return err
	}
	migrate := `"tenure migrate up"`
	if a.schema != store.DefaultSchema {
		migrate = fmt.Sprintf(`"tenure migrate up --schema %s"`, a.schema)
	}
	msg := fmt.Sprintf("schema %q has no Tenure tables", a.schema)
	const listed = 5
	switch n := len(schemas); {
	case n == 0:
		msg += "; run " + migrate + " to create them"
	case n == 1:
		msg += fmt.Sprintf("; Tenure schemas here: %s (use --schema %s), or run %s to create them", schemas[0], schemas[0], migrate)
	case n <= listed:
		msg += fmt.Sprintf("; Tenure schemas here: %s (use --schema NAME), or run %s to create them", strings.Join(schemas, ", "), migrate)
	default:
		msg += fmt.Sprintf("; Tenure schemas here: %s and %d more (use --schema NAME), or run %s to create them",
			strings.Join(schemas[:listed], ", "), n-listed, migrate)
	}
	return schemaError{msg, err}
}

// exitCode maps an error to the documented exit status.
func exitCode(err error) int {
	var u usageError
	var q quiet
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &q):
		return q.code
	case errors.As(err, &u):
		return exitUsage
	case errors.Is(err, operator.ErrNotFound), errors.Is(err, operator.ErrNoDownstream), errors.Is(err, operator.ErrNoSchedule):
		return exitNotFound
	case errors.Is(err, store.ErrSchemaMissing), errors.Is(err, store.ErrSchemaTooNew):
		return exitSchema
	}
	// Cobra's own argument and command errors are plain errors.
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "invalid argument"} {
		if strings.HasPrefix(msg, p) {
			return exitUsage
		}
	}
	return exitError
}

// app is one invocation: global flags, output streams and, once opened, the
// database.
type app struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	schema string
	json   bool

	pool *pgxpool.Pool
	op   *operator.Operator

	// noticed holds the NOTICEs the database sent (tenure retention run
	// reads those of retain_history).
	mu      sync.Mutex
	noticed []string
}

// notice records a NOTICE of the database.
func (a *app) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	a.mu.Lock()
	a.noticed = append(a.noticed, n.Message)
	a.mu.Unlock()
}

// notices returns the NOTICEs received since the last call, and forgets
// them.
func (a *app) notices() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.noticed
	a.noticed = nil
	return n
}

// run executes the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{ctx: ctx, stdout: stdout, stderr: stderr}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err != nil {
		err = a.schemaHint(err)
	}
	if a.pool != nil {
		a.pool.Close()
	}
	if err != nil {
		fmt.Fprintln(stderr, "tenure: "+message(err))
		if exitCode(err) == exitUsage {
			fmt.Fprintln(stderr, `Run "tenure --help" for usage.`)
		}
	}
	return exitCode(err)
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "tenure",
		Short: "Operate Tenure: runs, failures, requeues, timelines, signals, cancels, limits, retention, migrations",
		Long: `tenure is the operator CLI of Tenure, the durable-execution SDK for Go on
PostgreSQL: what failed, why and since when, what a run waits for, and the
actions that put it right.

  tenure failures list     failed runs with their reason and last error
  tenure failures stats    failures counted by time, workflow, activity, reason
  tenure failures requeue  put failed runs back in the queue (--dry-run first)
  tenure runs start        start a run of a workflow by its name
  tenure runs list         runs by workflow, status, queue or key
  tenure runs count        how many runs match the filters of runs list
  tenure runs show         one run: input, output, failure, requeues, steps
                           and attempts
  tenure runs result       wait for a run's end: its output or its failure
  tenure runs signal       send a run a signal
  tenure runs cancel       cancel a run
  tenure runs delete       delete one finished run (audited)
  tenure explain           the retry policy recorded on a step
  tenure workers           live workers, and queued runs no worker serves
  tenure limits            flow control: each downstream's limits, load and
                           breaker (show, set, reset: audited)
  tenure breaker open      hold every call of a downstream (close: let them go)
  tenure audit             every requeue, cancel, delete and purge
  tenure ui                the web UI: failures, run timelines, workers
  tenure purge             delete old finished runs now, by age (audited)
  tenure retention show    the retention ages and the days' partitions dropped
  tenure retention set     set after how long finished runs go (audited)
  tenure retention run     a retention pass now, as workers do every 10 minutes
  tenure migrate status    the migrations applied and pending
  tenure migrate up        apply the pending migrations (--print-sql: print them)
  tenure version           this binary's release and schema version

A command that takes a run takes its ID or, with --key, the key it was
started with (sdk.WithKey). A list stops at --limit rows and says so on
stderr, with the --after cursor of the next page; --all lists them all.

It connects to the database named by the DATABASE_URL environment variable
(a PostgreSQL URL or key=value string) and works in the schema named by
--schema. Output is a table for people, or JSON with --json for scripts.

` + exitHelp,
		Example: `  export DATABASE_URL=postgres://tenure@db/app
  tenure migrate up
  tenure failures list --since 24h
  tenure failures stats --since 7d --bucket 1d
  tenure runs show --key order-42
  tenure runs show 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e
  tenure explain 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e 2
  tenure runs signal 0192c3e4-7b1a-7c52-9a3e-5d1f2b3c4d5e approve '{"by": "ada"}'
  tenure runs cancel --key order-42
  tenure runs start place-order '{"order_id": 42}' --key order-42
  tenure runs result --key order-42 --follow
  tenure failures requeue --activity charge --reason retries_exhausted --dry-run
  tenure limits set payments --concurrency 5 --note "INC-7: the provider throttles us"
  tenure breaker open payments --note "INC-9: the provider double-charges"
  tenure purge --completed-older-than 30d
  tenure retention set --completed 30d --cancelled 30d --note "policy RP-3"
  tenure migrate up --print-sql`,
		Version:       sdk.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE:          func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	root.PersistentFlags().StringVar(&a.schema, "schema", store.DefaultSchema, "schema holding Tenure's tables")
	root.PersistentFlags().BoolVar(&a.json, "json", false, "print JSON instead of tables")
	// --version prints what tenure version prints.
	root.Flags().Bool("version", false, "print the Tenure release and the schema version this binary carries")
	root.SetVersionTemplate(versionLine() + "\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{err} })
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(a.migrateCommand(), a.runsCommand(), a.failuresCommand(), a.explainCommand(),
		a.purgeCommand(), a.auditCommand(), a.workersCommand(), a.limitsCommand(), a.breakerCommand(), a.schedulesCommand(),
		a.retentionCommand(), a.uiCommand(), a.versionCommand())
	return root
}

// groupOnly is the annotation of a command that only holds subcommands:
// run alone, it prints its help. (tenure limits holds subcommands and lists
// the downstreams itself.)
const groupOnly = "group-only"

// group is a command that only holds subcommands.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:         use,
		Short:       short,
		Annotations: map[string]string{groupOnly: "true"},
		Args:        noArgs,
		RunE:        func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	c.AddCommand(subs...)
	return c
}

// noArgs rejects arguments, naming an unknown subcommand as such.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

// rangeArgs is cobra.RangeArgs as a usage error.
func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usagef("%s takes %s, got %d (see %s --help)", cmd.CommandPath(), arguments(lo, hi), len(args), cmd.CommandPath())
		}
		return nil
	}
}

// connect connects to DATABASE_URL, once.
func (a *app) connect() (*pgxpool.Pool, error) {
	if a.pool != nil {
		return a.pool, nil
	}
	if err := store.ValidateSchema(a.schema); err != nil {
		return nil, usageError{err}
	}
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return nil, usagef("DATABASE_URL is not set: export DATABASE_URL=postgres://user@host/db")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's message may echo the URL, password included: keep it out.
		return nil, usagef("DATABASE_URL is not a valid PostgreSQL connection string")
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.OnNotice = a.notice
	pool, err := pgxpool.NewWithConfig(a.ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(a.ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to the database in DATABASE_URL: %w", err)
	}
	a.pool = pool
	return pool, nil
}

// operator connects and returns the operator on the schema; its first
// action checks that the schema is migrated to the version this binary knows
// (store.ErrSchemaMissing otherwise).
func (a *app) operator() (*operator.Operator, error) {
	if a.op != nil {
		return a.op, nil
	}
	pool, err := a.connect()
	if err != nil {
		return nil, err
	}
	op, err := operator.New(pool, operator.WithSchema(a.schema))
	if err != nil {
		return nil, usageError{err}
	}
	a.op = op
	return op, nil
}
