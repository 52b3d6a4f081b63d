package store

import (
	"testing"

	"github.com/google/uuid"
)

// BenchmarkCommitBatchAdd measures gathering a batch of writes into the
// columns of the commit's statements, the part of Commit on the worker's
// hot path that runs before any statement: 64 writes, each a step's end and
// the next step's start, and one in eight the run's end with its release of
// the parent.
func BenchmarkCommitBatchAdd(b *testing.B) {
	out, policy := []byte(`{"ok":true}`), []byte(`{"max_attempts":3}`)
	writes := make([]Write, 64)
	for i := range writes {
		w := &writes[i]
		w.Lease = Lease{RunID: uuid.New(), Epoch: 1}
		w.StepDone = &StepDone{Step: 2, Attempt: 1, Output: out}
		if i%8 == 0 {
			w.CompleteRun, w.WakeParent = &RunOutput{Output: out}, true
			continue
		}
		w.StartAttempt = &AttemptStart{Step: 3, Attempt: 1, Activity: "charge", Policy: policy, Worker: "w1"}
	}
	b.ReportAllocs()
	for b.Loop() {
		var c commitBatch
		for i := range writes {
			c.add(i, &writes[i])
		}
	}
}
