package store_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
)

func fairRun(key string, weight int) store.NewRun {
	r := newRun("wf", "")
	r.FairKey, r.FairWeight = key, weight
	return r
}

// insertFair records runs in one call and returns their IDs.
func insertFair(t *testing.T, st *store.Store, runs ...store.NewRun) []uuid.UUID {
	t.Helper()
	out, err := st.InsertRuns(t.Context(), st.Pool(), runs)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, len(out))
	for i, o := range out {
		if !o.Created {
			t.Fatalf("run %d not created: %+v", i, o)
		}
		ids[i] = o.ID
	}
	return ids
}

func fairVT(t *testing.T, st *store.Store, id uuid.UUID) *int64 {
	t.Helper()
	return scalar[*int64](t, st, `SELECT fair_vt FROM {schema}.runs WHERE id = $1`, id)
}

// A key's runs take consecutive strides of 1,000,000 / weight from the
// later of the key's last virtual time and its queue's clock; runs without
// a key have none; the next claim advances the clock to what this one took.
func TestInsertRuns_FairVirtualTimes(t *testing.T) {
	st := newStore(t)
	ids := insertFair(t, st, fairRun("a", 1), fairRun("a", 1), fairRun("b", 4), newRun("wf", ""), fairRun("a", 1))
	want := []int64{1_000_000, 2_000_000, 250_000, -1, 3_000_000}
	for i, id := range ids {
		got := fairVT(t, st, id)
		if (got == nil) != (want[i] < 0) || (got != nil && *got != want[i]) {
			t.Fatalf("run %d: fair_vt %v, want %d", i, got, want[i])
		}
	}
	if got := fairVT(t, st, insertFair(t, st, fairRun("a", 2))[0]); *got != 3_500_000 {
		t.Fatalf("a's next run of weight 2 at %d, want 3,500,000", *got)
	}
	// The keyless run first, then the fair run of least virtual time.
	claimed, err := st.Claim(t.Context(), []string{"wf"}, []string{"default"}, 2, "w", time.Minute)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claimed %d: %v", len(claimed), err)
	}
	got := map[uuid.UUID]bool{claimed[0].ID: true, claimed[1].ID: true}
	if !got[ids[3]] || !got[ids[2]] {
		t.Fatalf("claimed %v, want the keyless run %s and b's %s", claimed, ids[3], ids[2])
	}
	// The next claim's batch (here one that takes nothing) advances the clock.
	if vt := scalar[int64](t, st, `SELECT vt FROM {schema}.fair_queues WHERE queue = 'default'`); vt != 0 {
		t.Fatalf("queue clock %d before the next claim, want 0", vt)
	}
	if _, err := st.Claim(t.Context(), []string{"wf"}, []string{"default"}, 0, "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	if vt := scalar[int64](t, st, `SELECT vt FROM {schema}.fair_queues WHERE queue = 'default'`); vt != 250_000 {
		t.Fatalf("queue clock %d after the next claim, want 250,000", vt)
	}
	// A newcomer starts at the clock; so does b, which had nothing ahead of it.
	if got := fairVT(t, st, insertFair(t, st, fairRun("c", 1))[0]); *got != 1_250_000 {
		t.Fatalf("c's first run at %d, want 1,250,000", *got)
	}
	if got := fairVT(t, st, insertFair(t, st, fairRun("b", 4))[0]); *got != 500_000 {
		t.Fatalf("b's next run at %d, want 500,000", *got)
	}
	// Another queue has its own clock and keys.
	other := fairRun("a", 1)
	other.Queue = "other"
	if got := fairVT(t, st, insertFair(t, st, other)[0]); *got != 1_000_000 {
		t.Fatalf("a's first run on queue other at %d, want 1,000,000", *got)
	}
	var queued int
	var ahead float64
	if err := st.Pool().QueryRow(t.Context(), replaceSchema(`SELECT queued, ahead FROM {schema}.fair_share WHERE queue = 'default' AND key = 'a'`,
		st.Schema())).Scan(&queued, &ahead); err != nil || queued != 4 || ahead != 3.25 {
		t.Fatalf("fair_share of a: %d queued, %v ahead (%v), want 4 and 3.25", queued, ahead, err)
	}
}

// Concurrent Starts of one key wait for each other's row of the key: their
// runs take distinct, consecutive virtual times.
func TestInsertRuns_ConcurrentStartsOfAKeyTakeConsecutiveTimes(t *testing.T) {
	st := newStore(t)
	const callers, each = 10, 5
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs := make([]store.NewRun, each)
			for i := range runs {
				runs[i] = fairRun("a", 1)
			}
			_, err := st.InsertRuns(t.Context(), st.Pool(), runs)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	n := scalar[int64](t, st, `SELECT count(DISTINCT fair_vt) FROM {schema}.runs WHERE fair_vt BETWEEN 1000000 AND $1 AND fair_vt % 1000000 = 0`,
		int64(callers*each)*1_000_000)
	if n != callers*each {
		t.Fatalf("%d distinct virtual times in 1..%d strides, want %d", n, callers*each, callers*each)
	}
}

// The claim takes a backlogged key's runs in turn with newcomers', by
// virtual time; a run that ran before keeps its virtual time; priority
// comes first and runs without a key go first at equal priority.
func TestClaim_FairRunsInterleaveByVirtualTime(t *testing.T) {
	st := newStore(t)
	key := map[uuid.UUID]string{}
	add := func(name string, runs ...store.NewRun) {
		for _, id := range insertFair(t, st, runs...) {
			key[id] = name
		}
	}
	var backlog []store.NewRun
	for range 6 {
		backlog = append(backlog, fairRun("a", 1))
	}
	add("a", backlog...)
	add("b", fairRun("b", 1), fairRun("b", 1))
	add("c", fairRun("c", 1), fairRun("c", 1))
	add("keyless", newRun("wf", ""))
	urgent := fairRun("u", 1)
	urgent.Priority = 1
	add("urgent", urgent)

	var order []string
	claim := func() []store.Claimed {
		t.Helper()
		claimed, err := st.Claim(t.Context(), []string{"wf"}, []string{"default"}, 1, "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claimed {
			order = append(order, key[c.ID])
		}
		return claimed
	}
	claim()
	claim()
	// a's first run ran and comes back (a retry, a sleep that ended): with
	// its virtual time, behind b's and c's runs of the same time, which
	// were due before.
	back := claim()[0]
	if !back.Fresh {
		t.Fatalf("claimed %+v, want a fresh run", back)
	}
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`
		UPDATE {schema}.runs SET status = 'queued', run_after = now(), claimant = NULL, lease_expires_at = NULL
		WHERE id = $1`, st.Schema()), back.ID); err != nil {
		t.Fatal(err)
	}
	for len(claim()) > 0 { // the last, empty, claim advances the clock
	}
	want := "urgent keyless a b c a a b c a a a a"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("claimed in the order %q, want %q", got, want)
	}
	if vt := scalar[int64](t, st, `SELECT vt FROM {schema}.fair_queues WHERE queue = 'default'`); vt != 6_000_000 {
		t.Fatalf("queue clock %d, want a's last, 6,000,000", vt)
	}
}

func TestNewRunCheck_Fairness(t *testing.T) {
	for _, c := range []struct {
		key    string
		weight int
		want   string
	}{
		{"", 2, "fairness weight 2 without a fairness key"},
		{"t", 0, `fairness key "t": weight 0, want 1 to 1000000`},
		{"t", 1_000_001, `fairness key "t": weight 1000001, want 1 to 1000000`},
		{strings.Repeat("k", 201), 1, "fairness key is 201 bytes, limit 200"},
		{strings.Repeat("k", 200), 1, ""},
		{"", 0, ""},
	} {
		r := fairRun(c.key, c.weight)
		err := r.Check(1 << 20)
		if (err == nil) != (c.want == "") || (err != nil && err.Error() != c.want) {
			t.Errorf("key %q weight %d: %v, want %q", c.key, c.weight, err, c.want)
		}
	}
}

// A transaction still open after a Start of a fairness key holds the key's
// row: InsertRunsBounded (the client's shared flush) gives up on it after
// its wait, as on a busy run key, and records runs of other keys at once.
func TestInsertRunsBounded_BusyFairKey(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	insertFair(t, st, fairRun("a", 1)) // the key's row exists: the open transaction updates it
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := st.InsertRuns(ctx, tx, []store.NewRun{fairRun("a", 1)}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	_, err = st.InsertRunsBounded(ctx, []store.NewRun{newRun("wf", ""), fairRun("a", 1)}, 50*time.Millisecond)
	if !errors.Is(err, store.ErrKeyBusy) || time.Since(begin) > 5*time.Second {
		t.Fatalf("InsertRunsBounded: %v after %s, want ErrKeyBusy after about 50ms", err, time.Since(begin))
	}
	got, err := st.InsertRunsBounded(ctx, []store.NewRun{newRun("wf", ""), fairRun("b", 1)}, 50*time.Millisecond)
	if err != nil || !got[0].Created || !got[1].Created {
		t.Fatalf("InsertRunsBounded with another key: %v, %v", got, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Once it committed, the next run of a follows the one it recorded.
	if got := fairVT(t, st, insertFair(t, st, fairRun("a", 1))[0]); *got != 3_000_000 {
		t.Fatalf("a's third run at %v, want 3,000,000", *got)
	}
}
