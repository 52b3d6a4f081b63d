package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/store"
)

func newRun(workflow, key string) store.NewRun {
	return store.NewRun{ID: uuid.Must(uuid.NewV7()), Workflow: workflow, Queue: "default", Key: key, Input: []byte(`{"n":1}`)}
}

func countRuns(t *testing.T, st *store.Store) int {
	t.Helper()
	var n int
	if err := st.Pool().QueryRow(t.Context(), fmt.Sprintf(`SELECT count(*) FROM %s.runs`, pgx.Identifier{st.Schema()}.Sanitize())).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// One call records many runs with keys, without keys, new and existing, and
// duplicate keys within the call, each reported in input order.
func TestInsertRuns_RecordsEachRunOnceInOrder(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	old := newRun("wf-old", "k-old")
	if _, _, created, err := st.InsertRun(ctx, st.Pool(), old); err != nil || !created {
		t.Fatalf("InsertRun: created %v, %v", created, err)
	}
	runs := []store.NewRun{
		newRun("wf", ""),
		newRun("wf", "k-1"),
		newRun("wf", "k-old"), // exists: a run of another workflow
		newRun("wf", "k-1"),   // duplicate within the call
		newRun("wf", ""),
		newRun("wf", "k-2"),
	}
	runs[4].Delay = time.Hour
	runs[4].Priority = 7
	runs[5].Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	got, err := st.InsertRuns(ctx, st.Pool(), runs)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Inserted{
		{ID: runs[0].ID, Workflow: "wf", Created: true},
		{ID: runs[1].ID, Workflow: "wf", Created: true},
		{ID: old.ID, Workflow: "wf-old", Created: false},
		{ID: runs[1].ID, Workflow: "wf", Created: false},
		{ID: runs[4].ID, Workflow: "wf", Created: true},
		{ID: runs[5].ID, Workflow: "wf", Created: true},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if n := countRuns(t, st); n != 5 {
		t.Fatalf("%d runs, want 5 (1 old + 4 new)", n)
	}
	r, err := st.GetRun(ctx, runs[4].ID)
	if err != nil || r.Status != "queued" {
		t.Fatalf("GetRun: %+v, %v", r, err)
	}
	var prio int
	var delayed bool
	var tp string
	err = st.Pool().QueryRow(ctx, fmt.Sprintf(`SELECT priority, run_after > now() + interval '59 minutes',
		(SELECT traceparent FROM %[1]s.runs WHERE id = $2) FROM %[1]s.runs WHERE id = $1`, pgx.Identifier{st.Schema()}.Sanitize()),
		runs[4].ID, runs[5].ID).Scan(&prio, &delayed, &tp)
	if err != nil || prio != 7 || !delayed || tp != runs[5].Traceparent {
		t.Fatalf("priority %d, delayed %v, traceparent %q, %v", prio, delayed, tp, err)
	}
}

// A call sends one NOTIFY naming the distinct queues of the runs due now,
// and none when no run it inserted is due.
func TestInsertRuns_OneNoticePerCall(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	conn, err := st.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{st.RunsChannel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	a, b, c, later := newRun("wf", ""), newRun("wf", ""), newRun("wf", ""), newRun("wf", "")
	a.Queue, b.Queue, c.Queue, later.Queue = "q-a", "q-b", "q-a", "q-later"
	later.Delay = time.Hour
	if _, err := st.InsertRuns(ctx, st.Pool(), []store.NewRun{a, b, c, later}); err != nil {
		t.Fatal(err)
	}
	// Sent again (a retry), a run inserts nothing and announces nothing.
	if got, err := st.InsertRuns(ctx, st.Pool(), []store.NewRun{a}); err != nil || !got[0].Created {
		t.Fatalf("InsertRuns again: %v, %v", got, err)
	}
	delayed := newRun("wf", "")
	delayed.Delay = time.Hour
	if _, err := st.InsertRuns(ctx, st.Pool(), []store.NewRun{delayed}); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	var payloads []string
	for {
		n, err := conn.Conn().WaitForNotification(wait)
		if err != nil {
			break
		}
		payloads = append(payloads, n.Payload)
	}
	if len(payloads) != 1 {
		t.Fatalf("notices %q: want one", payloads)
	}
	queues := strings.Split(payloads[0], ",")
	if len(queues) != 2 || !(queues[0] == "q-a" && queues[1] == "q-b") {
		t.Fatalf("payload %q: want the distinct due queues q-a,q-b", payloads[0])
	}
}

// Many concurrent calls starting the same key make one run; every caller
// gets its ID and exactly one caller is told it created it.
func TestInsertRuns_ConcurrentKeyMakesOneRun(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	var wg sync.WaitGroup
	results := make([]store.Inserted, 20)
	errs := make([]error, 20)
	for i := range results {
		wg.Go(func() {
			r := newRun("wf", "same")
			var out []store.Inserted
			out, errs[i] = st.InsertRuns(ctx, st.Pool(), []store.NewRun{newRun("wf", ""), r})
			if errs[i] == nil {
				results[i] = out[1]
			}
		})
	}
	wg.Wait()
	created := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if r.ID != results[0].ID {
			t.Fatalf("call %d got run %s, call 0 %s", i, r.ID, results[0].ID)
		}
		if r.Created {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d callers created the run, want 1", created)
	}
	if n := countRuns(t, st); n != 21 {
		t.Fatalf("%d runs, want 21", n)
	}
}

// In the caller's transaction the runs exist only if it commits.
func TestInsertRuns_InTransaction(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
		if _, err := st.InsertRuns(ctx, tx, []store.NewRun{newRun("wf", "k"), newRun("wf", "")}); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if err == nil || countRuns(t, st) != 0 {
		t.Fatalf("after rollback: %v, %d runs", err, countRuns(t, st))
	}
	// In the caller's transaction, JIT is off for the insert alone: the
	// caller's setting holds for its own statements after it.
	err = pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL jit = on"); err != nil {
			return err
		}
		got, err := st.InsertRuns(ctx, tx, []store.NewRun{newRun("wf", "k"), newRun("wf", "k")})
		if err != nil || !got[0].Created || got[1].Created || got[0].ID != got[1].ID {
			t.Fatalf("in a transaction: %v, %v", got, err)
		}
		var jit string
		if err := tx.QueryRow(ctx, "SHOW jit").Scan(&jit); err != nil || jit != "on" {
			t.Fatalf("the caller's jit after InsertRuns: %q, %v; want its own, on", jit, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Inputs are stored as JSON that SQL can read.
func TestInsertRuns_InputIsJSON(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	r := newRun("wf", "")
	r.Input, _ = json.Marshal(map[string]any{"order": "A-1", "amount": 100})
	if _, err := st.InsertRuns(ctx, st.Pool(), []store.NewRun{r}); err != nil {
		t.Fatal(err)
	}
	var amount int
	err := st.Pool().QueryRow(ctx, fmt.Sprintf(`SELECT (input->>'amount')::int FROM %s.runs`, pgx.Identifier{st.Schema()}.Sanitize())).Scan(&amount)
	if err != nil || amount != 100 {
		t.Fatalf("amount %d, %v", amount, err)
	}
}

// InsertRunsBounded gives up on a key held by an open transaction after its
// wait, recording nothing; without busy keys it is InsertRuns.
func TestInsertRunsBounded_BusyKey(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := st.InsertRuns(ctx, tx, []store.NewRun{newRun("wf", "held")}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	_, err = st.InsertRunsBounded(ctx, []store.NewRun{newRun("wf", ""), newRun("wf", "held")}, 50*time.Millisecond)
	if !errors.Is(err, store.ErrKeyBusy) || time.Since(begin) > 5*time.Second {
		t.Fatalf("InsertRunsBounded: %v after %s, want ErrKeyBusy after about 50ms", err, time.Since(begin))
	}
	if n := countRuns(t, st); n != 0 {
		t.Fatalf("%d committed runs, want 0", n)
	}
	got, err := st.InsertRunsBounded(ctx, []store.NewRun{newRun("wf", ""), newRun("wf", "free")}, 50*time.Millisecond)
	if err != nil || !got[0].Created || !got[1].Created {
		t.Fatalf("InsertRunsBounded: %v, %v", got, err)
	}
	// The lock timeout was local to the batch: the pooled connection keeps
	// the server's setting.
	cfg, err := pgxpool.ParseConfig(st.Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	st1, err := store.New(one, store.WithSchema(st.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st1.InsertRunsBounded(ctx, []store.NewRun{newRun("wf", "k")}, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var lt string
	if err := one.QueryRow(ctx, "SHOW lock_timeout").Scan(&lt); err != nil || lt != "0" {
		t.Fatalf("lock_timeout %q after the batch, %v", lt, err)
	}
}

// The same runs sent again, as after a try whose outcome the caller did not
// see, insert nothing more, and the runs the earlier try recorded are
// reported created, with keys and without; a new run with a taken key is
// still a duplicate.
func TestInsertRuns_SentAgainAreReportedCreated(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := t.Context()
	runs := []store.NewRun{newRun("wf", ""), newRun("wf", "k-1"), newRun("wf", "k-1"), newRun("wf", "")}
	first, err := st.InsertRuns(ctx, st.Pool(), runs)
	if err != nil {
		t.Fatal(err)
	}
	again, err := st.InsertRuns(ctx, st.Pool(), runs)
	if err != nil {
		t.Fatal(err)
	}
	bounded, err := st.InsertRunsBounded(ctx, runs, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Inserted{
		{ID: runs[0].ID, Workflow: "wf", Created: true},
		{ID: runs[1].ID, Workflow: "wf", Created: true},
		{ID: runs[1].ID, Workflow: "wf", Created: false},
		{ID: runs[3].ID, Workflow: "wf", Created: true},
	}
	for _, got := range [][]store.Inserted{first, again, bounded} {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got  %v\nwant %v", got, want)
		}
	}
	if n := countRuns(t, st); n != 3 {
		t.Fatalf("%d runs, want 3", n)
	}
	other, err := st.InsertRuns(ctx, st.Pool(), []store.NewRun{newRun("wf", "k-1")})
	if err != nil || other[0].Created || other[0].ID != runs[1].ID {
		t.Fatalf("a new run with a taken key: %v, %v", other, err)
	}
}

// A retry sent while the first try is still in flight on the server (its
// client saw the connection fail, its transaction is still open) waits for
// it: when the first try commits, the retry reports its runs created; when
// it rolls back, the retry creates them.
func TestInsertRuns_SentAgainWhileTheFirstTryIsInFlight(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			t.Parallel()
			st := newStore(t)
			ctx := t.Context()
			runs := []store.NewRun{newRun("wf", ""), newRun("wf", "k")}
			tx, err := st.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := st.InsertRuns(ctx, tx, runs); err != nil {
				t.Fatal(err)
			}
			type result struct {
				out []store.Inserted
				err error
			}
			retry := make(chan result, 1)
			go func() {
				out, err := st.InsertRuns(ctx, st.Pool(), runs)
				retry <- result{out, err}
			}()
			select {
			case r := <-retry:
				t.Fatalf("the retry did not wait for the first try: %v, %v", r.out, r.err)
			case <-time.After(200 * time.Millisecond):
			}
			if commit {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			r := <-retry
			if r.err != nil || !r.out[0].Created || !r.out[1].Created || r.out[0].ID != runs[0].ID || r.out[1].ID != runs[1].ID {
				t.Fatalf("retry: %v, %v", r.out, r.err)
			}
			if n := countRuns(t, st); n != 2 {
				t.Fatalf("%d runs, want 2", n)
			}
		})
	}
}

// A run holding a key is reported with OtherInput when the input sent with
// the key is another JSON value: as an existing run, or as an earlier item of
// the same call, on every kind of DB.
func TestInsertRuns_OtherInputUnderTheSameKey(t *testing.T) {
	st := newStore(t)
	ctx := t.Context()
	conn, err := st.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	with := func(key, input string) store.NewRun {
		r := newRun("wf", key)
		r.Input = []byte(input)
		return r
	}
	for _, db := range []struct {
		name string
		db   store.DB
	}{{"pool", st.Pool()}, {"connection", conn}} {
		t.Run(db.name, func(t *testing.T) {
			k := func(s string) string { return db.name + "/" + s }
			got, err := st.InsertRuns(ctx, db.db, []store.NewRun{with(k("a"), `{"x":1,"y":2}`), with(k("b"), `{"x":1}`)})
			if err != nil {
				t.Fatal(err)
			}
			a := got[0].ID
			got, err = st.InsertRuns(ctx, db.db, []store.NewRun{
				with(k("a"), `{"y":2, "x":1.0}`), // the same value as a's
				with(k("a"), `{"x":2}`),          // another, repeating the key
				with(k("b"), `{"x":2}`),          // another than b's
				with(k("c"), `[1]`),              // new
				with(k("c"), `[1, 2]`),           // another than this call's c
				with(k("c"), `[ 1 ]`),            // the same as this call's c
			})
			if err != nil {
				t.Fatal(err)
			}
			want := []bool{false, true, true, false, true, false}
			for i, ins := range got {
				if ins.OtherInput != want[i] {
					t.Errorf("item %d: OtherInput %v, want %v (%+v)", i, ins.OtherInput, want[i], ins)
				}
			}
			if got[0].ID != a || got[1].ID != a || !got[3].Created || got[4].ID != got[3].ID || got[5].ID != got[3].ID {
				t.Fatalf("runs %+v: want a's run for items 0 and 1, one new run for c", got)
			}
		})
	}
}
