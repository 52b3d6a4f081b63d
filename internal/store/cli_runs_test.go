package store_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// TestSearchRuns_PagesByKeysetListEveryRunOnce: pages that each start after
// the last run of the one before list every run once, in the order of one
// listing, even when runs share a creation time (the ID breaks the tie)
// and when a run is started between two pages (it is newer: not listed).
func TestSearchRuns_PagesByKeysetListEveryRunOnce(t *testing.T) {
	st := newStore(t)
	for range 7 {
		if _, _, _, err := st.InsertRun(t.Context(), st.Pool(), store.NewRun{ID: uuid.New(), Workflow: "pages", Queue: "default", Input: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Four of them at one instant: only the ID orders them.
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.runs SET created_at = '2024-01-01T00:00:00.123456Z'
		WHERE id IN (SELECT id FROM {schema}.runs ORDER BY id LIMIT 4)`, st.Schema())); err != nil {
		t.Fatal(err)
	}
	whole, err := st.SearchRuns(t.Context(), store.RunSearch{Workflow: "pages"})
	if err != nil || len(whole) != 7 {
		t.Fatalf("one listing: %d runs, %v", len(whole), err)
	}
	var paged []uuid.UUID
	q := store.RunSearch{Workflow: "pages", Limit: 3}
	for page := 0; ; page++ {
		rows, err := st.SearchRuns(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			break
		}
		for _, r := range rows {
			paged = append(paged, r.ID)
		}
		last := rows[len(rows)-1]
		q.AfterCreated, q.AfterID = last.CreatedAt, last.ID
		if page == 0 { // a run started meanwhile is newer than the first page
			if _, _, _, err := st.InsertRun(t.Context(), st.Pool(), store.NewRun{ID: uuid.New(), Workflow: "pages", Queue: "default", Input: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var want []uuid.UUID
	for _, r := range whole {
		want = append(want, r.ID)
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("pages of 3 listed\n%v\nwant the one listing\n%v", paged, want)
	}

	n, err := st.CountRuns(t.Context(), store.RunSearch{Workflow: "pages", Limit: 1})
	if err != nil || n != 8 {
		t.Fatalf("CountRuns: %d, %v; want 8 whatever the limit", n, err)
	}
	n, err = st.CountRuns(t.Context(), store.RunSearch{Workflow: "pages", AfterCreated: whole[0].CreatedAt, AfterID: whole[0].ID})
	if err != nil || n != 6 {
		t.Fatalf("CountRuns after the newest of the first listing: %d, %v; want 6", n, err)
	}
	if n, err = st.CountRuns(t.Context(), store.RunSearch{Workflow: "pages", Status: store.RunCompleted}); err != nil || n != 0 {
		t.Fatalf("CountRuns of completed runs: %d, %v; want 0", n, err)
	}
}

// TestFailures_PagesByKeysetListEveryFailureOnce is the same for failure
// rows, ordered by failed_at and ID.
func TestFailures_PagesByKeysetListEveryFailureOnce(t *testing.T) {
	st := newStore(t)
	h := newHistory(t, st)
	for range 5 {
		h.run(outcome{workflow: "pages", activity: "charge", errors: 1, reason: policy.NonRetryable})
	}
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.failures SET failed_at = '2024-01-01T00:00:00.654321Z'
		WHERE id IN (SELECT id FROM {schema}.failures ORDER BY id LIMIT 3)`, st.Schema())); err != nil {
		t.Fatal(err)
	}
	whole, err := st.Failures(t.Context(), store.FailureFilter{Workflow: "pages"})
	if err != nil || len(whole) != 5 {
		t.Fatalf("one listing: %d failures, %v", len(whole), err)
	}
	var paged []int64
	f := store.FailureFilter{Workflow: "pages", Limit: 2}
	for {
		rows, err := st.Failures(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			break
		}
		for _, r := range rows {
			paged = append(paged, r.ID)
		}
		f.AfterFailed, f.AfterID = rows[len(rows)-1].FailedAt, rows[len(rows)-1].ID
	}
	var want []int64
	for _, r := range whole {
		want = append(want, r.ID)
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("pages of 2 listed %v, want the one listing %v", paged, want)
	}
}
