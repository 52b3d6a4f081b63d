package store_test

import (
	"fmt"
	"testing"

	"github.com/tenurehq/tenure/internal/store"
)

// BenchmarkInsertRuns records runs n at a time on the pool: one batch, one
// implicit transaction per call whatever n.
func BenchmarkInsertRuns(b *testing.B) {
	st := newStore(b)
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprint("runs=", n), func(b *testing.B) {
			runs := make([]store.NewRun, n)
			for b.Loop() {
				for i := range runs {
					runs[i] = newRun("wf", "")
				}
				if _, err := st.InsertRuns(b.Context(), st.Pool(), runs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/run")
		})
	}
}
