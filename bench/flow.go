package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// The flow scenarios (F-conc, F-rate, F-breaker) run one-step runs of
// flowWorkflow on worker subprocesses: its one activity calls the
// downstream flowDownstream, declared by each worker with the limits of the
// scenario's flowSpec.

const (
	flowDownstream = "bench-api"
	flowActivity   = "bench-api-call"
	flowWorkflow   = "bench-flow"
	// flowCallsTable records every call of the activity as it makes it
	// (F-conc), in the layout invariant.FlowOptions.Invocations reads.
	flowCallsTable = "flow_calls"
)

// flowSpec is what the workers of a flow scenario serve, passed to them as
// JSON (bench worker -flow).
type flowSpec struct {
	Scenario    string `json:"scenario"` // conc, rate or breaker
	Concurrency int    `json:"concurrency,omitempty"`
	Rate        int    `json:"rate,omitempty"` // starts per second, per key
	Burst       int    `json:"burst,omitempty"`
	// OpenFor is the breaker's open time (breaker only; 0: flow's default).
	OpenFor time.Duration `json:"open_for,omitempty"`
	// Count makes the activity record its calls in flowCallsTable and
	// count them in flight in flow_gauge.
	Count bool `json:"count,omitempty"`
}

// downstream is the downstream the spec declares: its limits, the default
// retry budget.
func (s flowSpec) downstream() *flow.Downstream {
	var opts []flow.Option
	if s.Concurrency > 0 {
		opts = append(opts, flow.Concurrency(s.Concurrency))
	}
	if s.Rate > 0 {
		opts = append(opts, flow.Rate(s.Rate, time.Second, s.Burst))
	}
	if s.Scenario == "breaker" {
		opts = append(opts, flow.Breaker(flow.BreakerPolicy{OpenFor: s.OpenFor}))
	}
	return flow.New(flowDownstream, opts...)
}

// flowIn is a flow run's input: the key of its call under the limits, how
// long the call takes, and the outage of the downstream (unix ms, [from,
// until)) during which it answers 503.
type flowIn struct {
	Key       string `json:"key,omitempty"`
	MS        int    `json:"ms,omitempty"`
	DownFrom  int64  `json:"down_from,omitempty"`
	DownUntil int64  `json:"down_until,omitempty"`
}

// errUnavailable is what the downstream answers during its outage.
var errUnavailable = errors.New("bench-api answered 503 Service Unavailable")

// newFlowWorkflow is the flow scenarios' workflow: one call of the
// activity, under spec's downstream, with the default retry policy. calls,
// when not nil, records each call (spec.Count). A client that only starts
// runs may pass a zero spec.
func newFlowWorkflow(spec flowSpec, calls *callLog) *sdk.Workflow[flowIn, int] {
	act := activities.New(flowActivity, func(ctx context.Context, in flowIn) (_ int, err error) {
		began := time.Now()
		if calls != nil {
			done, cerr := calls.enter(ctx)
			if cerr != nil {
				return 0, cerr
			}
			defer func() { err = errors.Join(err, done()) }()
		}
		if now := time.Now().UnixMilli(); now >= in.DownFrom && now < in.DownUntil {
			return 0, errUnavailable
		}
		t := time.NewTimer(time.Until(began.Add(time.Duration(in.MS) * time.Millisecond)))
		defer t.Stop()
		select {
		case <-t.C:
			return 1, nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}).Calls(spec.downstream(), func(in flowIn) string { return in.Key })
	return sdk.NewWorkflow(flowWorkflow, func(ctx context.Context, in flowIn) (int, error) {
		return sdk.Execute(ctx, act, in)
	})
}

// registerFlow registers the workflow of the flow scenario o.flow on w,
// with its call log when it counts calls; the returned func closes the
// log's pool.
func registerFlow(ctx context.Context, w *runtime.Worker, o workerOpts) (func(), error) {
	var spec flowSpec
	if err := json.Unmarshal([]byte(o.flow), &spec); err != nil {
		return nil, fmt.Errorf("-flow %q: %w", o.flow, err)
	}
	var calls *callLog
	closeLog := func() {}
	if spec.Count {
		// The log writes through connections of its own, as a remote
		// system would see the calls: never the worker's, and named by
		// this process (see endCallsOf). Its writes are the measuring's,
		// not the measured's: they do not wait for their WAL's flush
		// (the count is exact by the gauge row's lock whatever the
		// flush; a server crash ends the benchmark anyway), and each of
		// the process's calls in flight has a connection (up to 8), so
		// that the log adds as little as it can to the time a slot is
		// held. With 2 connections and synchronous commits, a slot was
		// held 8 to 10 ms longer than its call.
		pool, err := newNamedPool(ctx, o.url, 8, callLogName(os.Getpid()), map[string]string{"synchronous_commit": "off"})
		if err != nil {
			return nil, err
		}
		calls, closeLog = &callLog{pool: pool, schema: o.schema}, pool.Close
	}
	if err := w.Register(newFlowWorkflow(spec, calls)); err != nil {
		closeLog()
		return nil, err
	}
	return closeLog, nil
}

// callLog is the activity's own record of its calls: a row per call in
// flowCallsTable, and the count of calls in flight (flow_gauge), updated
// under the gauge row's lock so that every process sees the others' calls.
type callLog struct {
	pool   *pgxpool.Pool
	schema string
}

// sqlFlowTables are the call log's tables, in schema {s}.
const sqlFlowTables = `
	CREATE TABLE {s}.flow_gauge (
		name    text    PRIMARY KEY,
		n       integer NOT NULL DEFAULT 0, -- calls in flight now
		peak    integer NOT NULL DEFAULT 0, -- the most ever in flight at once
		peak_at timestamptz);
	INSERT INTO {s}.flow_gauge (name) VALUES ('` + flowDownstream + `');
	CREATE TABLE {s}.` + flowCallsTable + ` (
		id          bigserial   PRIMARY KEY,
		run_id      uuid        NOT NULL,
		step        integer     NOT NULL,
		attempt     integer     NOT NULL,
		pid         integer     NOT NULL,
		in_flight   integer     NOT NULL, -- calls in flight once it began, itself included
		at          timestamptz NOT NULL DEFAULT clock_timestamp(),
		returned_at timestamptz,
		killed      boolean     NOT NULL DEFAULT false);
	CREATE INDEX ON {s}.` + flowCallsTable + ` (pid) WHERE returned_at IS NULL;`

// sqlFlowOrder records, by triggers the benchmark adds to Tenure's tables,
// the database's clock at the moment each attempt row and each breaker
// audit row is written. Both are written under the downstream's state row
// lock, which _flow takes first and holds to the commit, so these times
// are in the order of the admissions and of the breaker's moves. The rows'
// own times (attempts.started_at, audit_log.at) are their transactions'
// starts, which need not be: a batch that began first may take the lock
// second (F-breaker saw an attempt admitted while the breaker was still
// closed stamped 5 ms after the move to open).
const sqlFlowOrder = `
	CREATE TABLE {s}.flow_order (
		attempt_run uuid, attempt_step integer, attempt integer, audit_id bigint,
		at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE FUNCTION {s}.flow_order_attempt() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO {s}.flow_order (attempt_run, attempt_step, attempt) VALUES (NEW.run_id, NEW.step, NEW.attempt);
		RETURN NULL;
	END $$;
	CREATE TRIGGER flow_order AFTER INSERT ON {s}.attempts FOR EACH ROW EXECUTE FUNCTION {s}.flow_order_attempt();
	CREATE FUNCTION {s}.flow_order_audit() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO {s}.flow_order (audit_id) VALUES (NEW.id);
		RETURN NULL;
	END $$;
	CREATE TRIGGER flow_order AFTER INSERT ON {s}.audit_log FOR EACH ROW WHEN (NEW.action = 'breaker')
		EXECUTE FUNCTION {s}.flow_order_audit();`

// createFlowOrder adds sqlFlowOrder's table and triggers to schema.
func createFlowOrder(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if _, err := pool.Exec(ctx, sqlIn(sqlFlowOrder, schema)); err != nil {
		return fmt.Errorf("create the triggers that order admissions: %w", err)
	}
	return nil
}

// createFlowTables creates the call log's tables in schema.
func createFlowTables(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	_, err := pool.Exec(ctx, sqlIn(sqlFlowTables, schema))
	if err != nil {
		return fmt.Errorf("create the flow scenarios' tables: %w", err)
	}
	return nil
}

// sqlIn puts the sanitized schema in place of {s}.
func sqlIn(sql, schema string) string {
	return strings.ReplaceAll(sql, "{s}", pgx.Identifier{schema}.Sanitize())
}

// enter records a call beginning, counted in flight, and returns what
// records its return.
func (l *callLog) enter(ctx context.Context) (func() error, error) {
	info, ok := activities.InfoFrom(ctx)
	if !ok {
		return nil, errors.New("flow call outside an attempt")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var id int64
	err := l.pool.QueryRow(ctx, sqlIn(`
		WITH g AS (
			UPDATE {s}.flow_gauge SET n = n + 1, peak = greatest(peak, n + 1),
			       peak_at = CASE WHEN n + 1 > peak THEN clock_timestamp() ELSE peak_at END
			WHERE name = $1 RETURNING n)
		INSERT INTO {s}.`+flowCallsTable+` (run_id, step, attempt, pid, in_flight)
		SELECT $2, $3, $4, $5, g.n FROM g RETURNING id`, l.schema),
		flowDownstream, info.RunID, info.Step, info.Attempt, os.Getpid()).Scan(&id)
	if err != nil {
		return nil, fmt.Errorf("record the call: %w", err)
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := l.pool.Exec(ctx, sqlIn(`
			WITH c AS (UPDATE {s}.`+flowCallsTable+` SET returned_at = clock_timestamp() WHERE id = $1 AND returned_at IS NULL RETURNING 1)
			UPDATE {s}.flow_gauge SET n = n - (SELECT count(*) FROM c) WHERE name = $2`, l.schema), id, flowDownstream)
		if err != nil {
			return fmt.Errorf("record the call's return: %w", err)
		}
		return nil
	}, nil
}

// callLogName is the application_name of process pid's call log.
func callLogName(pid int) string { return fmt.Sprintf("%s calls %d", appName, pid) }

// endCallsOf records that the calls in flight of process pid, which was
// killed, ended now: they leave the count in flight. It waits first for
// the server to end the process's call log sessions: a statement the
// process sent just before it died still runs to its end (a call counted
// in, after the calls were ended, counted in flight for ever: F-conc's
// gauge once read 22 at a limit of 20, the calls' own times 20).
func endCallsOf(ctx context.Context, pool *pgxpool.Pool, schema string, pid int) error {
	if err := waitFor(ctx, 10*time.Millisecond, 30*time.Second, "the killed process's call log sessions to end", func() (bool, error) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, callLogName(pid)).Scan(&n)
		return n == 0, err
	}); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, sqlIn(`
		WITH c AS (UPDATE {s}.`+flowCallsTable+` SET returned_at = clock_timestamp(), killed = true
		           WHERE pid = $1 AND returned_at IS NULL RETURNING 1)
		UPDATE {s}.flow_gauge SET n = n - (SELECT count(*) FROM c) WHERE name = $2`, schema), pid, flowDownstream)
	if err != nil {
		return fmt.Errorf("end the calls of killed process %d: %w", pid, err)
	}
	return nil
}
