package runtime

import (
	"context"
	"time"
)

// retentionEvery is how often a worker looks at the retention configured
// (one statement) and, when an age is set, carries it out
// (store.RetainHistory): the procedure takes turns, so one worker of the
// fleet does the work and the others return at once.
const retentionEvery = 10 * time.Minute

// retentionTimeout bounds one pass: the drops it does not finish are
// finished by the next pass, by the ledger.
const retentionTimeout = 10 * time.Minute

// retainHistory is the worker's retention loop, from its start to the end
// of the drain: a pass at once, then every retentionEvery.
func (w *Worker) retainHistory(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		w.retainOnce(ctx)
		timer.Reset(retentionEvery)
	}
}

// retainOnce is one pass; a failure is logged with what to do.
func (w *Worker) retainOnce(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, w.cfg.StatementTimeout)
	cfg, err := w.store.RetentionConfigured(rctx)
	cancel()
	if err == nil && cfg.Completed == 0 && cfg.Cancelled == 0 && cfg.Failed == 0 {
		return
	}
	if err == nil {
		rctx, cancel = context.WithTimeout(ctx, retentionTimeout)
		err = w.store.RetainHistory(rctx, w.cfg.Label, "")
		cancel()
	}
	if err != nil && ctx.Err() == nil {
		w.cfg.Logger.Warn("tenure: the retention pass failed; the next pass, in ten minutes, finishes what it left "+
			"(history_drops lists the drops; CALL retain_history() runs one by hand)",
			"worker", w.cfg.Label, "error", err)
	}
}
