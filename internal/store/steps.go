package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tenurehq/tenure/policy"
)

// Step is a step's record as a replaying worker needs it: its outcome if it
// has one, and the budgets already spent (attempts after BudgetFrom only).
type Step struct {
	Step         int
	Activity     string
	Status       StepStatus
	Output       []byte
	Reason       policy.Reason
	ErrorMessage string
	ErrorType    string
	ErrorValue   []byte // JSON of a failed step's error of a registered type; nil if none
	BudgetFrom   int
	LastAttempt  int           // highest attempt number so far, 0 if none
	LastStatus   AttemptStatus // status of that attempt
	LastDelay    time.Duration
	Errors       int // attempts after BudgetFrom that ended failed or timed_out
	Rescues      int // attempts after BudgetFrom that were lost
	// LastTraceID and LastSpanID name the last attempt's span, if traced.
	LastTraceID, LastSpanID string

	// Kind is what the step is; Activity is then its name (see StepMark).
	Kind StepKind
	// DueIn is the time left until a sleep's due time or a signal's timeout,
	// by the database clock when the steps were loaded (negative: past);
	// NoDue when the step has none.
	DueIn time.Duration
	// Child is, for a child step, the child run and how it stands.
	Child *ChildState
	// InputHash is, for an activity step, the hash of the input its first
	// attempt was called with (InputHash); 0 when none was recorded (a step
	// recorded before schema version 18).
	InputHash uint64
}

// ChildState is how a child run stands, as its parent's step sees it.
type ChildState struct {
	ID           uuid.UUID
	Status       RunStatus
	Output       []byte
	Reason       policy.Reason // of its open failure, when it failed
	ErrorMessage string
	ErrorType    string
}

// Steps loads every step of a run with its budget counters, in step order, in
// one round trip. Budgets are counted from the attempt rows, so they survive
// restarts and need no second counter that could drift.
func (s *Store) Steps(ctx context.Context, runID uuid.UUID) (map[int]Step, error) {
	out := map[int]Step{}
	var st Step
	var delayMS int64
	var dueMS float64
	var child pgtype.UUID
	var cs ChildState
	var inputHash *int64
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&st.Step, &st.Activity, &st.Status, &st.Output, &st.Reason,
			&st.ErrorMessage, &st.ErrorType, &st.ErrorValue, &st.BudgetFrom, &st.LastAttempt, &st.LastStatus, &delayMS,
			&st.Errors, &st.Rescues, &st.LastTraceID, &st.LastSpanID,
			&st.Kind, &dueMS, &child, &cs.Status, &cs.Output, &cs.Reason, &cs.ErrorMessage, &cs.ErrorType, &inputHash}, func() error {
			st.LastDelay = time.Duration(delayMS) * time.Millisecond
			if inputHash != nil {
				st.InputHash = uint64(*inputHash)
			}
			st.DueIn = NoDue
			if dueMS == dueMS { // not NaN
				st.DueIn = time.Duration(dueMS * float64(time.Millisecond))
			}
			if child.Valid {
				cs.ID = child.Bytes
				c := cs
				st.Child = &c
			}
			out[st.Step] = st
			st, cs = Step{}, ChildState{}
			return nil
		})
		return err
	}, s.sql(`
		SELECT s.step, s.activity, s.status, s.output, coalesce(s.reason, ''),
		       coalesce(s.error_message, ''), coalesce(s.error_type, ''), s.error_value, s.budget_from,
		       coalesce(max(a.attempt), 0),
		       coalesce((array_agg(a.status ORDER BY a.attempt DESC))[1], ''),
		       coalesce((array_agg(a.delay_ms ORDER BY a.attempt DESC))[1], 0),
		       count(*) FILTER (WHERE a.attempt > s.budget_from AND a.status IN ('failed', 'timed_out')),
		       count(*) FILTER (WHERE a.attempt > s.budget_from AND a.status = 'lost'),
		       coalesce((array_agg(a.trace_id ORDER BY a.attempt DESC))[1], ''),
		       coalesce((array_agg(a.span_id ORDER BY a.attempt DESC))[1], ''),
		       s.kind, coalesce(extract(epoch FROM s.due_at - now()) * 1000, 'NaN')::float8,
		       s.child_run_id, coalesce(c.status, ''), c.output, coalesce(cf.reason, ''),
		       coalesce(coalesce(cf.error_message, c.error_message), ''), coalesce(cf.error_type, ''),
		       s.input_hash
		FROM {schema}.steps s
		LEFT JOIN {schema}.attempts a ON a.run_id = s.run_id AND a.step = s.step
		LEFT JOIN {schema}.runs c ON c.id = s.child_run_id
		LEFT JOIN {schema}.failures cf ON cf.run_id = c.id AND cf.requeued_at IS NULL
		WHERE s.run_id = $1
		GROUP BY s.run_id, s.step, c.id, cf.id
		ORDER BY s.step`), uuidArg(runID))
	return out, s.wrap("load steps", err)
}

// SettledStepStatus returns the status of step n of run id once no
// transaction is still writing the step: it waits for the lock that a
// checkpoint not yet committed holds on the step's row. A transactional
// step whose COMMIT its worker stopped waiting for (a timeout, a lost
// connection) may still be committing on the server: the COMMIT was sent,
// or is held up on its way (a slow server, a paused process, a congested
// network), and a read that does not wait sees the step still running
// while it is about to complete. Once the lock is free, the transaction
// has committed or rolled back for good, and the status says which. A step
// with no row has the empty status.
func (s *Store) SettledStepStatus(ctx context.Context, id uuid.UUID, n int) (StepStatus, error) {
	var st StepStatus
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&st); err != nil {
				return err
			}
		}
		return rows.Err()
	}, s.sql(`SELECT status FROM {schema}.steps WHERE run_id = $1 AND step = $2 FOR SHARE`), uuidArg(id), n)
	return st, s.wrap("read a step's settled status", err)
}

// LostAttempt is an attempt that was running when its worker's lease expired.
type LostAttempt struct {
	Step      int
	Attempt   int
	StartedAt time.Time
	Activity  string
	Rescue    bool
	Epoch     int64
	Worker    string
	TraceID   string
	SpanID    string
}

// MarkLost closes the attempts a previous lease holder left running: their
// outcome is unknown, so they are "lost" and charged to the step's rescue
// budget (and not to the run's backstop reclaim count, which it resets).
// Fenced by the new lease, so only the current holder can judge them.
func (s *Store) MarkLost(ctx context.Context, l Lease) ([]LostAttempt, error) {
	var out []LostAttempt
	err := s.query(ctx, s.pool, planHot, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[LostAttempt])
		return err
	}, s.sql(`
		WITH lost AS (
			UPDATE {schema}.attempts
			SET status = 'lost', ended_at = now(), hold_key = NULL,
			    error_message = 'lease expired while the attempt ran: the worker died, froze or was cut off'
			WHERE run_id = $1 AND status = 'running' AND epoch < $2
			  AND EXISTS (SELECT 1 FROM {schema}.runs WHERE id = $1 AND epoch = $2 AND status = 'running')
			RETURNING step, attempt, started_at, activity, is_rescue, epoch, worker,
			          coalesce(trace_id, '') AS trace_id, coalesce(span_id, '') AS span_id),
		-- A crash inside an activity is charged to the step's rescue budget,
		-- not to the run's backstop count of crashes outside activities.
		backstop AS (
			UPDATE {schema}.runs SET reclaims = 0
			WHERE id = $1 AND epoch = $2 AND EXISTS (SELECT 1 FROM lost))
		SELECT * FROM lost`), uuidArg(l.RunID), l.Epoch)
	return out, s.wrap("mark lost attempts", err)
}

// AttemptStart is what a worker records before it invokes an activity.
type AttemptStart struct {
	Step     int
	Attempt  int
	Activity string
	Policy   []byte // the effective policy as JSON
	Rescue   bool
	Worker   string
	TraceID  string
	SpanID   string
	// InputHash is the step's input hash (InputHash), recorded by its first
	// attempt; 0 for none.
	InputHash uint64
	// Take, when set, admits the attempt under a downstream's limits in the
	// same transaction: denied, the attempt is not recorded and the run is
	// parked (WriteResult.Denied).
	Take *FlowTake
}

// AttemptEnd is how an attempt that did not succeed ended.
type AttemptEnd struct {
	Step         int
	Attempt      int
	Status       AttemptStatus // failed (the default), timed_out or interrupted
	ErrorMessage string
	ErrorType    string
	ErrorStack   string
	Delay        *time.Duration // the delay chosen before the next attempt, if there is one
	DelaySource  string
}

// StepFailure is how a step gave up.
type StepFailure struct {
	Step         int
	Reason       policy.Reason
	ErrorMessage string
	ErrorType    string
	// ErrorValue is the JSON of the error, when its type is one the
	// workflow registered (sdk.WithErrorType); nil otherwise.
	ErrorValue []byte
	// End closes the last attempt as well, when it is still running (it ended
	// with the error that made the step give up). Nil when the last attempt is
	// already closed (e.g. lost).
	End *AttemptEnd
}

func delayMS(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}
