package ui_test

import (
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/operator"
)

// BenchmarkRequeuePreview_OneMillionFailures measures the preview of a
// requeue by filter of 1,000,000 open failures (a count, a breakdown, a
// digest and 20 rows, computed in SQL): its server time per preview, and
// what the handler allocates (B/op), which the page bounds, not the set.
// Then, once, the confirm that requeues them all in one statement. Seeding
// takes about a minute:
//
//	go test ./ui -run '^$' -bench RequeuePreview -benchtime 3x
func BenchmarkRequeuePreview_OneMillionFailures(b *testing.B) {
	f := newFixture(b, writes)
	begin := time.Now()
	const n = 1_000_000
	f.seedFailures(n)
	if _, err := f.pool.Exec(b.Context(), `VACUUM ANALYZE `+f.schema+`.failures, `+f.schema+`.runs`); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d failed runs in %s", n, time.Since(begin).Round(time.Second))

	form := url.Values{"workflow": {"incident"}}
	var body string
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	for b.Loop() {
		w := f.post("failures/requeue", form, postOpts{})
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `data-testid="preview-count">1,000,000<`) {
			b.Fatalf("preview: %d\n%s", w.Code, firstLines(w.Body.String(), 40))
		}
		body = w.Body.String()
	}
	runtime.ReadMemStats(&after)
	b.Logf("heap in use after the previews: %d kB (before: %d kB)", after.HeapInuse/1024, before.HeapInuse/1024)

	// The confirm is one statement of a million runs: longer than the
	// operator's default statement timeout (30 s), which it is given here.
	op, err := operator.New(f.pool, operator.WithSchema(f.schema), operator.WithStatementTimeout(10*time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	f.op = op
	f.mount(writes)
	form.Set("confirm", "1")
	form.Set("checked", "pay-supplier")
	previewed(b, body, form)
	begin = time.Now()
	w := f.post("failures/requeue", form, postOpts{})
	b.Logf("confirm of %d: %d in %s", n, w.Code, time.Since(begin).Round(time.Millisecond))
	if w.Code != http.StatusSeeOther {
		b.Logf("confirm:\n%s", firstLines(w.Body.String(), 40))
	}
}
