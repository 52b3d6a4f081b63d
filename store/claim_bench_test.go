package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/store"
)

// BenchmarkClaim measures one claim of 10 runs (and their hand-back) with a
// backlog of queued runs behind it. The claim finds candidates by index in
// order, so its cost must not grow with the backlog: compare the cases
// within one run.
//
//	go test ./store -run '^$' -bench Claim
func BenchmarkClaim(b *testing.B) {
	for _, backlog := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			st := newStore(b)
			// A backlog inserted in one statement; the rows are what Start writes.
			_, err := st.Pool().Exec(b.Context(), fmt.Sprintf(`
				INSERT INTO %s.runs (id, workflow, input, run_after)
				SELECT gen_random_uuid(), 'wf', '{}', now() - i * interval '1 millisecond'
				FROM generate_series(1, $1) AS i`, st.Schema()), backlog)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := st.Pool().Exec(b.Context(), fmt.Sprintf(`ANALYZE %s.runs`, st.Schema())); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				claimed, err := st.Claim(b.Context(), []string{"wf"}, []string{"default"}, 10, "bench", time.Minute)
				if err != nil || len(claimed) != 10 {
					b.Fatalf("claimed %d: %v", len(claimed), err)
				}
				writes := make([]store.Write, len(claimed))
				for i, c := range claimed {
					writes[i] = store.Write{Lease: store.Lease{RunID: c.ID, Epoch: c.Epoch}, Release: &store.Release{}}
				}
				if _, err := st.Commit(b.Context(), st.Pool(), writes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
