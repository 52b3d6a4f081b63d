package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotFinished is returned by DeleteRun for a run that is queued or
// running: only completed, failed and cancelled runs can be deleted.
var ErrNotFinished = errors.New("run has not finished (cancel it first, or wait for its end)")

// DeleteRun deletes one finished run with everything recorded for it, and
// its child runs (and theirs) with it, through the SQL function delete_run,
// which writes one audit_log row (action delete) with the note, the run's
// ID, workflow and status, and every run deleted, but not the run's key. It
// returns the runs deleted (the run and its descendants) and the failure
// rows deleted with them. It returns ErrNotFound for an unknown run and
// ErrNotFinished for a run queued or running, and refuses as well a child
// run whose parent may still replay it and a run with child runs still
// queued or running.
func (s *Store) DeleteRun(ctx context.Context, id uuid.UUID, note string) (Purged, error) {
	var p Purged
	err := s.query(ctx, s.pool, planHot, scanOne(&p.Runs, &p.Failures),
		s.sql(`SELECT runs_deleted, failures_deleted FROM {schema}.delete_run($1, nullif($2, ''))`), uuidArg(id), note)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "P0002", "55000": // no_data_found, object_not_in_prerequisite_state
			return Purged{}, s.explainMiss(ctx, id, ErrNotFinished)
		case "TN003": // a parent or children still need the run
			msg := strings.TrimPrefix(pe.Message, "delete_run: ")
			if pe.Hint != "" {
				hint := strings.TrimSuffix(pe.Hint, ".")
				msg += " (" + strings.ToLower(hint[:1]) + hint[1:] + ")"
			}
			return Purged{}, errors.New("delete run: " + msg)
		}
	}
	if err != nil {
		return Purged{}, s.wrap(fmt.Sprintf("delete run %s", id), err)
	}
	return p, nil
}
