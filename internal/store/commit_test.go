package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// claimN starts and claims n runs of workflow "wf" on a queue of their own.
func claimN(t *testing.T, st *store.Store, n int) []store.Lease {
	t.Helper()
	queue := "q-" + uuid.NewString()[:8]
	runs := make([]store.NewRun, n)
	for i := range runs {
		runs[i] = store.NewRun{ID: uuid.New(), Workflow: "wf", Queue: queue, Input: []byte(`{}`)}
		if _, _, _, err := st.InsertRun(t.Context(), st.Pool(), runs[i]); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := st.Claim(t.Context(), []string{"wf"}, []string{queue}, n, "w", time.Minute)
	if err != nil || len(claimed) != n {
		t.Fatalf("claimed %d of %d: %v", len(claimed), n, err)
	}
	leases := make([]store.Lease, n)
	for i, c := range claimed {
		leases[i] = store.Lease{RunID: c.ID, Epoch: c.Epoch}
	}
	return leases
}

func TestCommit_ALostFenceFailsOnlyItsOwnRun(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	leases := claimN(t, st, 3)
	pol, _ := json.Marshal(policy.Default())
	start := func(l store.Lease) store.Write {
		return store.Write{Lease: l, StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "a", Policy: pol, Worker: "w"}}
	}
	if res, err := st.Commit(t.Context(), st.Pool(), []store.Write{start(leases[0]), start(leases[1]), start(leases[2])}); err != nil || res[0].Err != nil || res[1].Err != nil || res[2].Err != nil {
		t.Fatalf("start attempts: %v %+v", err, res)
	}

	// Another worker took run 1 over (its lease expired and was reclaimed).
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.runs SET epoch = epoch + 1 WHERE id = $1`, st.Schema()), leases[1].RunID); err != nil {
		t.Fatal(err)
	}
	conn := listen(t, st.DoneChannel())

	// One batch: run 0 completes its step and the run; run 1 (fenced out)
	// tries the same; run 2 completes its step and starts step 2.
	done := &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`7`)}
	out := &store.RunOutput{Output: []byte(`7`)}
	next := start(leases[2]).StartAttempt
	next.Step = 2
	res, err := st.Commit(t.Context(), st.Pool(), []store.Write{
		{Lease: leases[0], StepDone: done, CompleteRun: out},
		{Lease: leases[1], StepDone: done, CompleteRun: out},
		{Lease: leases[2], StepDone: done, StartAttempt: next},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[2].Err != nil || !errors.Is(res[1].Err, store.ErrLeaseLost) {
		t.Fatalf("results %+v: want only run 1 refused", res)
	}
	status := func(l store.Lease) string {
		return scalar[string](t, st, `SELECT r.status || '/' || string_agg(a.step || ':' || a.status, ',' ORDER BY a.step)
			FROM {schema}.runs r JOIN {schema}.attempts a ON a.run_id = r.id WHERE r.id = $1 GROUP BY r.status`, l.RunID)
	}
	for i, want := range []string{"completed/1:succeeded", "running/1:running", "running/1:succeeded,2:running"} {
		if got := status(leases[i]); got != want {
			t.Errorf("run %d: %s, want %s", i, got, want)
		}
	}
	// One notice for the batch, naming only the run it did end.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Payload != leases[0].RunID.String() {
		t.Fatalf("notice %q, want only run 0 (%s)", n.Payload, leases[0].RunID)
	}
}

func TestCommit_OneNoticeNamesEveryRunTheBatchEnded(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	leases := claimN(t, st, 450) // more than one notice's payload holds
	conn := listen(t, st.DoneChannel())
	writes := make([]store.Write, len(leases))
	for i, l := range leases {
		writes[i] = store.Write{Lease: l, CompleteRun: &store.RunOutput{Output: []byte(`1`)}}
		if i%2 == 1 {
			writes[i] = store.Write{Lease: l, FailRun: &store.Failure{Reason: "workflow_error", ErrorMessage: "no"}}
		}
	}
	res, err := st.Commit(t.Context(), st.Pool(), writes)
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for i, l := range leases {
		if res[i].Err != nil {
			t.Fatalf("write %d: %v", i, res[i].Err)
		}
		want = append(want, l.RunID.String())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	notices := 0
	for len(got) < len(want) {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("after %d notices, %d IDs: %v", notices, len(got), err)
		}
		notices++
		got = append(got, strings.Split(n.Payload, ",")...)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) || notices != 3 {
		t.Fatalf("%d notices with %d IDs, want 3 notices naming the %d runs", notices, len(got), len(want))
	}
	if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.failures`); n != len(leases)/2 {
		t.Fatalf("%d failure rows, want %d", n, len(leases)/2)
	}
}

// listen returns a connection listening on channel.
func listen(t *testing.T, channel string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// A write repeated after it committed (the worker lost the connection during
// COMMIT and could not tell) is answered as a success and changes nothing:
// every kind of part, alone and with a run's end.
func TestCommit_AWriteRepeatedAfterItCommittedIsASuccessAndWritesNothingTwice(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	leases := claimN(t, st, 4)
	pol, _ := json.Marshal(policy.Default())
	start := func(l store.Lease, step int) store.Write {
		return store.Write{Lease: l, StartAttempt: &store.AttemptStart{Step: step, Attempt: 1, Activity: "a", Policy: pol, Worker: "w"}}
	}
	done := &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`7`)}
	failed := &store.AttemptEnd{Attempt: 1, Status: "failed", ErrorMessage: "boom"}
	rounds := [][]store.Write{
		{start(leases[0], 1), start(leases[1], 1), start(leases[2], 1), start(leases[3], 1)},
		{
			{Lease: leases[0], StepDone: done, StartAttempt: start(leases[0], 2).StartAttempt},
			{Lease: leases[1], StepDone: done},
			{Lease: leases[2], EndAttempt: &store.AttemptEnd{Step: 1, Attempt: 1, Status: "failed", ErrorMessage: "boom"}},
			{Lease: leases[3], StepDone: done},
		},
		{
			{Lease: leases[0], StepDone: &store.StepDone{Step: 2, Attempt: 1, Output: []byte(`8`)}, CompleteRun: &store.RunOutput{Output: []byte(`8`)}},
			{Lease: leases[1], Release: &store.Release{Delay: time.Hour}},
			{Lease: leases[2], FailStep: &store.StepFailure{Step: 1, Reason: "retries_exhausted", ErrorMessage: "boom", End: failed},
				FailRun: &store.Failure{Reason: "retries_exhausted", Step: 1, Activity: "a", ErrorMessage: "boom"}},
			{Lease: leases[3], FailRun: &store.Failure{Reason: "workflow_error", ErrorMessage: "no"}},
		},
	}
	state := func() string {
		return scalar[string](t, st, `SELECT string_agg(x, ' ' ORDER BY x) FROM (
			SELECT r.id::text || '=' || r.status || coalesce(r.output::text, '') || '@' || r.run_after::text AS x FROM {schema}.runs r
			UNION ALL SELECT s.run_id::text || '/' || s.step || '=' || s.status || coalesce(s.output::text, '') || coalesce(s.finished_at::text, '') FROM {schema}.steps s
			UNION ALL SELECT a.run_id::text || '/' || a.step || '/' || a.attempt || '=' || a.status || coalesce(a.ended_at::text, '') FROM {schema}.attempts a
			UNION ALL SELECT f.run_id::text || '!' || f.reason FROM {schema}.failures f) AS all_rows`)
	}
	for i, writes := range rounds {
		if res, err := st.Commit(t.Context(), st.Pool(), writes); err != nil {
			t.Fatalf("round %d: %v", i, err)
		} else {
			for j, r := range res {
				if r.Err != nil {
					t.Fatalf("round %d, write %d: %v", i, j, r.Err)
				}
			}
		}
		before := state()
		conn := listen(t, st.DoneChannel())
		res, err := st.Commit(t.Context(), st.Pool(), writes)
		if err != nil {
			t.Fatalf("round %d repeated: %v", i, err)
		}
		for j, r := range res {
			if r.Err != nil {
				t.Errorf("round %d, write %d repeated: %v, want a success", i, j, r.Err)
			}
		}
		if after := state(); after != before {
			t.Errorf("round %d: the repeat changed the rows:\nbefore %s\nafter  %s", i, before, after)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		if n, err := conn.WaitForNotification(ctx); err == nil {
			t.Errorf("round %d: the repeat sent notice %q", i, n.Payload)
		}
		cancel()
	}
	if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.failures`); n != 2 {
		t.Fatalf("%d failure rows, want 2", n)
	}

	// A repeat is told from a write whose lease is gone: the run ended by
	// this epoch is a success, the same end under another epoch is not.
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.runs SET epoch = epoch + 1 WHERE id = $1`, st.Schema()), leases[0].RunID); err != nil {
		t.Fatal(err)
	}
	res, err := st.Commit(t.Context(), st.Pool(), rounds[2][:1])
	if err != nil || !errors.Is(res[0].Err, store.ErrLeaseLost) {
		t.Fatalf("completion under an old epoch: %v %+v, want ErrLeaseLost", err, res)
	}
}

// One batch may carry writes of two executions of one run: the one whose
// lease was taken over and the one that took it. Only the holder's are
// fenced through; the other's are refused, even for the very same attempt.
func TestCommit_TwoEpochsOfOneRunInOneBatchAreToldApart(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	old := claimN(t, st, 1)[0]
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.runs SET epoch = epoch + 1 WHERE id = $1`, st.Schema()), old.RunID); err != nil {
		t.Fatal(err)
	}
	cur := store.Lease{RunID: old.RunID, Epoch: old.Epoch + 1}
	pol, _ := json.Marshal(policy.Default())
	start := func(l store.Lease) store.Write {
		return store.Write{Lease: l, StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "a", Policy: pol, Worker: "w"}}
	}
	res, err := st.Commit(t.Context(), st.Pool(), []store.Write{start(old), start(cur)})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err, store.ErrLeaseLost) || res[1].Err != nil {
		t.Fatalf("attempt starts %+v: want the old epoch's refused, the holder's recorded", res)
	}
	res, err = st.Commit(t.Context(), st.Pool(), []store.Write{
		{Lease: cur, StepDone: &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)}, CompleteRun: &store.RunOutput{Output: []byte(`1`)}},
		{Lease: old, FailRun: &store.Failure{Reason: "workflow_error", ErrorMessage: "stale"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || !errors.Is(res[1].Err, store.ErrLeaseLost) {
		t.Fatalf("run ends %+v: want the holder's completion, the old epoch's failure refused", res)
	}
	if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.failures`); n != 0 {
		t.Fatalf("%d failure rows from a stale epoch", n)
	}
}

// A run's end closes, as lost, every attempt still recorded running but the
// one it ends itself: after a failover that lost the write of an attempt's
// end (the worker went on with the run), no attempt is left running under an
// ended run.
func TestCommit_ARunsEndClosesTheAttemptsLeftRunning(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	leases := claimN(t, st, 3)
	start := func(l store.Lease, step int) {
		t.Helper()
		res, err := st.Commit(t.Context(), st.Pool(), []store.Write{{Lease: l,
			StartAttempt: &store.AttemptStart{Step: step, Attempt: 1, Activity: "a", Policy: []byte(`{}`), Worker: "w"}}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("start step %d: %v %+v", step, err, res)
		}
	}
	for _, l := range leases {
		start(l, 1) // its end's write is lost
		start(l, 2)
	}
	ends := []store.Write{
		{Lease: leases[0], StepDone: &store.StepDone{Step: 2, Attempt: 1, Output: []byte(`1`)}, CompleteRun: &store.RunOutput{Output: []byte(`1`)}},
		{Lease: leases[1], EndAttempt: &store.AttemptEnd{Step: 2, Attempt: 1, Status: store.AttemptFailed, ErrorMessage: "no"},
			FailRun: &store.Failure{Reason: "non_retryable", Step: 2, Activity: "a", Attempts: 1, Errors: 1, ErrorMessage: "no"}},
		{Lease: leases[2], EndAttempt: &store.AttemptEnd{Step: 2, Attempt: 1, Status: store.AttemptCancelled, ErrorMessage: "cancelled"},
			CancelRun: &store.RunCancel{Message: "cancelled"}},
	}
	res, err := st.Commit(t.Context(), st.Pool(), ends)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"succeeded", "failed", "cancelled"} {
		if res[i].Err != nil {
			t.Fatalf("end %d: %v", i, res[i].Err)
		}
		got := scalar[string](t, st, `SELECT string_agg(step || ':' || status, ',' ORDER BY step) FROM {schema}.attempts WHERE run_id = $1`, leases[i].RunID)
		if got != "1:lost,2:"+want {
			t.Errorf("run %d's attempts %s, want the one left running lost and the last %s", i, got, want)
		}
	}
	if n := scalar[int](t, st, `SELECT count(*) FROM {schema}.attempts a JOIN {schema}.runs r ON r.id = a.run_id
		WHERE a.status = 'running' AND r.status IN ('completed', 'failed', 'cancelled')`); n != 0 {
		t.Fatalf("%d attempts running under ended runs", n)
	}
}
