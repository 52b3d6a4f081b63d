package operator

import (
	"context"
	"fmt"
	"sort"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/record"
)

// ExportHistory returns what a run recorded, step by step, as a replay
// reads it (record.History): the form tenure runs export writes, for
// tenuretest.Replay to replay against new workflow code.
func (op *Operator) ExportHistory(ctx context.Context, runID uuid.UUID) (record.History, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return record.History{}, err
	}
	r, err := op.store.GetRun(ctx, runID)
	if err != nil {
		return record.History{}, err
	}
	steps, err := op.store.Steps(ctx, runID)
	if err != nil {
		return record.History{}, err
	}
	h := record.History{Format: record.HistoryFormat, RunID: r.ID, Workflow: r.Workflow, Status: r.Status,
		Input: r.Input, Output: r.Output, BuildID: r.BuildID, Steps: make([]record.HistoryStep, 0, len(steps))}
	for _, s := range steps {
		kind := s.Kind
		if kind == "" {
			kind = record.KindActivity
		}
		hs := record.HistoryStep{Step: s.Step, Kind: kind, Name: s.Activity, Status: s.Status, Output: s.Output,
			Reason: s.Reason, ErrorMessage: s.ErrorMessage, ErrorType: s.ErrorType, ErrorValue: s.ErrorValue}
		if s.InputHash != 0 {
			hs.InputHash = fmt.Sprintf("%016x", s.InputHash)
		}
		if s.Child != nil {
			id := s.Child.ID
			hs.ChildRunID = &id
		}
		h.Steps = append(h.Steps, hs)
	}
	sort.Slice(h.Steps, func(i, j int) bool { return h.Steps[i].Step < h.Steps[j].Step })
	return h, nil
}
