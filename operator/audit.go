package operator

import (
	"context"

	"github.com/tenurehq/tenure/record"
)

// AuditLog returns the newest audit_log rows, newest first; limit 0 means
// 100.
func (op *Operator) AuditLog(ctx context.Context, limit int) ([]record.AuditEntry, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return nil, err
	}
	return op.store.AuditLog(ctx, limit)
}
