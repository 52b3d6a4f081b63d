package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// planMode is how the statements of one batch are planned: the argument of
// the SQL procedure planner (migration 0009), which every batch a worker or a
// client sends opens with. Every mode turns JIT compilation off, for the
// batch's transaction only: the planner's cost of Tenure's statements grows
// with the tables' statistics, past the server's jit_above_cost, and
// compiling one cost 100 times its execution. CALL is a utility statement,
// never planned, so the settings' own statement is never compiled either.
type planMode string

const (
	// planHot is jit off: the client's statements and the worker's reads.
	planHot planMode = "hot"
	// planWrite adds no sequential or bitmap scans and generic plans: a
	// worker's commits and claims, which read their rows by key in a plan
	// cached once (see Commit).
	planWrite planMode = "write"
	// planRenew adds a custom plan at each call: the heartbeat's renewal
	// (see Renew).
	planRenew planMode = "renew"
	// planEnter and planLeave turn JIT off inside a caller's transaction
	// (StartTx, SendTx) and give the caller's setting back after Tenure's
	// statements.
	planEnter planMode = "enter"
	planLeave planMode = "leave"
)

// planned returns b with the planner settings of mode as its first
// statement; inside a caller's transaction (db is a pgx.Tx) JIT is turned
// off for Tenure's statements alone, the caller's setting restored by a
// last statement. The settings are local to the transaction: outside one,
// a batch is a single implicit transaction, so the pooled connection keeps
// its own settings.
func (s *Store) planned(db Batcher, mode planMode, b *pgx.Batch) *pgx.Batch {
	_, inTx := db.(pgx.Tx)
	if inTx && mode == planHot {
		mode = planEnter
	}
	out := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+2)}
	if s.build != "" && mode == planWrite {
		// A worker's writes and claims name its build (ValidateBuildID
		// keeps it free of quotes).
		out.Queue(s.sql(`CALL {schema}.planner('` + string(mode) + `', '` + s.build + `')`))
	} else {
		out.Queue(s.sql(`CALL {schema}.planner('` + string(mode) + `')`))
	}
	out.QueuedQueries = append(out.QueuedQueries, b.QueuedQueries...)
	if mode == planEnter {
		out.Queue(s.sql(`CALL {schema}.planner('leave')`))
	}
	return out
}

// send sends b on db behind the planner settings of mode (see planned) and
// returns its results, the settings' own already read: the first result is
// b's first statement's.
func (s *Store) send(ctx context.Context, db Batcher, mode planMode, b *pgx.Batch) pgx.BatchResults {
	res := db.SendBatch(ctx, s.planned(db, mode, b))
	if _, err := res.Exec(); err != nil {
		return failedBatch{res, err}
	}
	return res
}

// failedBatch is the results of a batch whose settings failed: every
// statement after them reports that error.
type failedBatch struct {
	pgx.BatchResults
	err error
}

func (f failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failedBatch) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failedBatch) QueryRow() pgx.Row                { return errRow{f.err} }
func (f failedBatch) Close() error {
	if err := f.BatchResults.Close(); err != nil {
		return err
	}
	return f.err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// query runs one statement on db behind the planner settings of mode and
// hands its rows to read, which must read them all (pgx.CollectRows,
// pgx.ForEachRow or scanOne do).
func (s *Store) query(ctx context.Context, db Batcher, mode planMode, read func(pgx.Rows) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	res := s.send(ctx, db, mode, b)
	rows, err := res.Query()
	if err == nil {
		err = read(rows)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	return err
}

// exec is query for a statement whose rows, if any, are not read.
func (s *Store) exec(ctx context.Context, db Batcher, mode planMode, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	res := s.send(ctx, db, mode, b)
	_, err := res.Exec()
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	return err
}

// scanOne reads the one row of a statement into dest, as pgx.Row.Scan does:
// pgx.ErrNoRows when there is none.
func scanOne(dest ...any) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		_, err := pgx.CollectOneRow(rows, func(row pgx.CollectableRow) (struct{}, error) {
			return struct{}{}, row.Scan(dest...)
		})
		return err
	}
}
