package store_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
)

// claimRow is a run as a test lays it down: due (or lease expired) age
// seconds ago, or in the future for a negative age.
type claimRow struct {
	name, workflow, queue string
	priority              int
	status                string // queued, running or completed
	age                   int    // seconds since run_after (queued) or lease expiry (running)
}

func TestClaim_TakesRegisteredWorkflowsInPriorityThenDueOrderAndNothingElse(t *testing.T) {
	// The worker registered workflows a and b and serves queues q1 and q2.
	workflows, queues := []string{"a", "b"}, []string{"q1", "q2"}
	// In the order a claim must take them: expired leases first, then best
	// priority, then earliest due, whatever their queue and workflow.
	takes := []claimRow{
		{"a/q2 lease expired", "a", "q2", 0, "running", 60},
		{"b/q2 p5 due 30s", "b", "q2", 5, "queued", 30},
		{"a/q1 p5 due 10s", "a", "q1", 5, "queued", 10},
		{"a/q2 p1 due 50s", "a", "q2", 1, "queued", 50},
		{"b/q1 p1 due 20s", "b", "q1", 1, "queued", 20},
		{"a/q1 p0 due 60s", "a", "q1", 0, "queued", 60},
		{"b/q2 p0 due 5s", "b", "q2", 0, "queued", 5},
	}
	never := []claimRow{
		{"c/q1 unregistered, best priority", "c", "q1", 9, "queued", 90},
		{"c/q2 unregistered, lease expired", "c", "q2", 9, "running", 90},
		{"a/q3 queue not served", "a", "q3", 9, "queued", 90},
		{"a/q1 due in an hour", "a", "q1", 9, "queued", -3600},
		{"b/q1 lease held", "b", "q1", 9, "running", -60},
		{"a/q2 completed", "a", "q2", 9, "completed", 90},
	}
	// The unregistered workflow's backlog, ahead of everything in both queues.
	for i := range 50 {
		never = append(never, claimRow{fmt.Sprintf("c backlog %d", i), "c", queues[i%2], 9, "queued", 100 + i})
	}

	for _, limit := range []int{1, 2, 3, 100} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
			st := newStore(t)
			names := map[uuid.UUID]string{}
			ids := map[string]uuid.UUID{}
			for _, r := range slices.Concat(takes, never) {
				id := insertClaimRow(t, st, r)
				names[id], ids[r.name] = r.name, id
			}

			for batch := 0; ; batch++ {
				claimed, err := st.Claim(t.Context(), workflows, queues, limit, "test-worker", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				want := takes[min(batch*limit, len(takes)):min((batch+1)*limit, len(takes))]
				// Within a batch the order of the result is not promised; the batch is.
				got := make([]string, len(claimed))
				for i, c := range claimed {
					got[i] = names[c.ID]
				}
				wantNames := make([]string, len(want))
				for i, r := range want {
					wantNames[i] = r.name
				}
				slices.Sort(got)
				slices.Sort(wantNames)
				if !slices.Equal(got, wantNames) {
					t.Fatalf("claim %d took %q, want %q", batch+1, got, wantNames)
				}
				for _, c := range claimed {
					r := want[slices.IndexFunc(want, func(r claimRow) bool { return r.name == names[c.ID] })]
					expired := r.status == "running"
					wantReclaims := 0
					if expired {
						wantReclaims = 1
					}
					// The epoch is the claim's time, in milliseconds since
					// 1970 (above insertClaimRow's 0 and 1): never one a
					// claim lost in a failover could have had.
					if ms := time.Since(time.UnixMilli(c.Epoch)); ms < -time.Minute || ms > time.Minute {
						t.Fatalf("claimed %s at epoch %d (%s), want about now in milliseconds", r.name, c.Epoch, time.UnixMilli(c.Epoch))
					}
					if c.Workflow != r.workflow || c.Queue != r.queue ||
						c.Reclaimed != expired || c.Fresh == expired || c.Reclaims != wantReclaims {
						t.Fatalf("claimed %s as %+v", r.name, c)
					}
					if c.QueueLag < time.Duration(r.age)*time.Second {
						t.Fatalf("claimed %s with queue lag %v, want at least %ds", r.name, c.QueueLag, r.age)
					}
				}
				if len(claimed) == 0 {
					break
				}
			}

			// Nothing else moved: not claimed, not re-leased.
			for _, r := range never {
				var status string
				var epoch int64
				err := st.Pool().QueryRow(t.Context(), replaceSchema(`SELECT status, epoch FROM {schema}.runs WHERE id = $1`, st.Schema()),
					ids[r.name]).Scan(&status, &epoch)
				wantEpoch := int64(0)
				if r.status != "queued" {
					wantEpoch = 1
				}
				if err != nil || status != r.status || epoch != wantEpoch {
					t.Fatalf("%s is %s at epoch %d (%v), want %s at epoch %d", r.name, status, epoch, err, r.status, wantEpoch)
				}
			}
		})
	}
}

// insertClaimRow writes r directly, in a state only the store's own
// statements otherwise reach (expired leases, completed runs), and returns
// its ID. A running or completed run has been claimed once (epoch 1).
func insertClaimRow(t *testing.T, st *store.Store, r claimRow) uuid.UUID {
	t.Helper()
	id := uuid.New()
	_, err := st.Pool().Exec(t.Context(), replaceSchema(`
		INSERT INTO {schema}.runs (id, workflow, queue, priority, input, status, run_after,
		                           claimant, epoch, lease_expires_at, started_at, finished_at)
		SELECT $1, $2, $3, $4, '{}', $5::text, now() - x.ago,
		       CASE WHEN $5 = 'running' THEN 'gone' END,
		       CASE WHEN $5 = 'queued' THEN 0 ELSE 1 END,
		       CASE WHEN $5 = 'running' THEN now() - x.ago END,
		       CASE WHEN $5 <> 'queued' THEN now() - x.ago - interval '1 minute' END,
		       CASE WHEN $5 = 'completed' THEN now() - x.ago END
		FROM (SELECT $6 * interval '1 second') AS x(ago)`, st.Schema()),
		id, r.workflow, r.queue, r.priority, r.status, r.age)
	if err != nil {
		t.Fatalf("insert %s: %v", r.name, err)
	}
	return id
}
