package operator

import (
	"context"

	"github.com/tenurehq/tenure/internal/store"
)

// AuditEntry is one row of the audit log: a requeue or a purge, when, by
// which database role, how many runs and failure rows, with what filter,
// which runs a requeue put back, and the note.
type AuditEntry = store.AuditEntry

// AuditLog returns the newest audit_log rows, newest first; limit 0 means
// 100.
func (op *Operator) AuditLog(ctx context.Context, limit int) ([]AuditEntry, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.AuditLog(ctx, limit)
}
