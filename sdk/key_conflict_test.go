package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/tenurehq/tenure/sdk"
)

// Raw takes its input as raw JSON, so that tests can send equal values in
// different bytes.
var Raw = sdk.NewWorkflow("raw", func(ctx context.Context, in json.RawMessage) (string, error) { return string(in), nil })

// isConflict reports whether err is ErrKeyConflict naming key and the run.
func isConflict(err error, key string, run *sdk.Run[string]) bool {
	return errors.Is(err, sdk.ErrKeyConflict) && strings.Contains(err.Error(), fmt.Sprintf("%q", key)) &&
		strings.Contains(err.Error(), run.ID.String())
}

// A second Start with a key returns the first run when its input is the same
// JSON value, whatever its bytes, and ErrKeyConflict naming the key and the
// run when it is another value; nothing is started.
func TestStart_SameKeyOtherInputIsAConflict(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	first, err := sdk.Start(ctx, c, Raw, json.RawMessage(`{"a":1,"b":[1,2]}`), sdk.WithKey("k"))
	if err != nil || !first.Created {
		t.Fatalf("first Start: %v, %v", first, err)
	}
	same, err := sdk.Start(ctx, c, Raw, json.RawMessage(`{"b": [1, 2], "a": 1.0}`), sdk.WithKey("k"))
	if err != nil || same.ID != first.ID || same.Created {
		t.Fatalf("same value in other bytes: %v, %v; want the first run, not created", same, err)
	}
	other, err := sdk.Start(ctx, c, Raw, json.RawMessage(`{"a":1,"b":[2,1]}`), sdk.WithKey("k"))
	if other != nil || !isConflict(err, "k", first) {
		t.Fatalf("other value: %v, %v; want ErrKeyConflict naming key and run", other, err)
	}
	if n := countRuns(t, pool, schema); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
}

// StartTx compares inputs as Start does, with a run already committed and
// with one started earlier in the same transaction.
func TestStartTx_SameKeyOtherInputIsAConflict(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	committed, err := sdk.Start(ctx, c, Fulfil, OrderIn{ID: "a"}, sdk.WithKey("committed"))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if r, err := sdk.StartTx(ctx, c, tx, Fulfil, OrderIn{ID: "a"}, sdk.WithKey("committed")); err != nil || r.ID != committed.ID || r.Created {
		t.Fatalf("StartTx, same input: %v, %v; want the committed run", r, err)
	}
	if _, err := sdk.StartTx(ctx, c, tx, Fulfil, OrderIn{ID: "b"}, sdk.WithKey("committed")); !errors.Is(err, sdk.ErrKeyConflict) || !strings.Contains(err.Error(), committed.ID.String()) {
		t.Fatalf("StartTx, other input: %v; want ErrKeyConflict naming the committed run", err)
	}
	mine, err := sdk.StartTx(ctx, c, tx, Fulfil, OrderIn{ID: "c"}, sdk.WithKey("in-tx"))
	if err != nil || !mine.Created {
		t.Fatalf("StartTx: %v, %v", mine, err)
	}
	if _, err := sdk.StartTx(ctx, c, tx, Fulfil, OrderIn{ID: "d"}, sdk.WithKey("in-tx")); !errors.Is(err, sdk.ErrKeyConflict) || !strings.Contains(err.Error(), mine.ID.String()) {
		t.Fatalf("StartTx again in the transaction, other input: %v; want ErrKeyConflict", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countRuns(t, pool, schema); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
}

// In StartMany, an element repeating a key gets the run of the key only with
// the same input; with another, whether the run is new in this call or older,
// it fails alone with ErrKeyConflict and the others are recorded.
func TestStartMany_SameKeyOtherInputIsAConflict(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	old, err := sdk.Start(ctx, c, Raw, json.RawMessage(`{"v":"old"}`), sdk.WithKey("old"))
	if err != nil {
		t.Fatal(err)
	}
	key := func(k string) []sdk.StartOption { return []sdk.StartOption{sdk.WithKey(k)} }
	runs, err := sdk.StartMany(ctx, c, Raw, []sdk.StartParams[json.RawMessage]{
		{Input: json.RawMessage(`{"v":1}`), Options: key("new")},       // 0: created
		{Input: json.RawMessage(`{"v":2}`), Options: key("new")},       // 1: conflict with 0
		{Input: json.RawMessage(`{"v": 1.0}`), Options: key("new")},    // 2: same value as 0
		{Input: json.RawMessage(`{"v":1}`), Options: key("new")},       // 3: same bytes as 0
		{Input: json.RawMessage(`{"v":"other"}`), Options: key("old")}, // 4: conflict with old
		{Input: json.RawMessage(`{"v":"other"}`), Options: key("old")}, // 5: the same, repeated
		{Input: json.RawMessage(`{"v": "old"}`), Options: key("old")},  // 6: old's value
		{Input: json.RawMessage(`{"v":3}`)},                            // 7: keyless
	})
	if len(runs) != 8 {
		t.Fatalf("StartMany: %d handles, %v", len(runs), err)
	}
	if !runs[0].Created || runs[7] == nil || !runs[7].Created {
		t.Fatalf("elements 0 and 7 not created: %v", runs)
	}
	for _, i := range []int{2, 3} {
		if runs[i] == nil || runs[i].ID != runs[0].ID || runs[i].Created {
			t.Errorf("element %d: %v, want element 0's run", i, runs[i])
		}
	}
	if runs[6] == nil || runs[6].ID != old.ID || runs[6].Created {
		t.Errorf("element 6: %v, want the old run", runs[6])
	}
	for _, i := range []int{1, 4, 5} {
		if runs[i] != nil {
			t.Errorf("element %d: %v, want nil", i, runs[i])
		}
	}
	if !isConflict(err, "new", runs[0]) || !isConflict(err, "old", old) || strings.Count(err.Error(), "already names run") != 3 {
		t.Fatalf("StartMany error %v: want ErrKeyConflict for elements 1, 4 and 5", err)
	}
	if n := countRuns(t, pool, schema); n != 3 {
		t.Fatalf("%d runs, want 3", n)
	}
}

// Concurrent Starts of one key with different inputs, recorded by one shared
// flush: one run, and each caller is told about its own input, whatever the
// order in the batch.
func TestStart_ConcurrentSameKeyOtherInputsShareAFlush(t *testing.T) {
	c, pool, schema := newClient(t)
	ctx := t.Context()
	leader, release := blockFlush(t, c, pool, schema)
	const n = 10
	runs := make([]*sdk.Run[string], n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			runs[i], errs[i] = sdk.Start(ctx, c, Fulfil, OrderIn{ID: "same", Amount: i % 2}, sdk.WithKey("shared"))
		})
	}
	waitPending(t, c, n) // all wait for the blocked flush: the next records them together
	flushes := sdk.Flushes(c)
	release()
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := sdk.Flushes(c) - flushes; got != 1 {
		t.Fatalf("%d flushes, want the %d Starts in one", got, n)
	}
	var amount int
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT (input->>'Amount')::int FROM %q.runs WHERE run_key = 'shared'`, schema)).Scan(&amount); err != nil {
		t.Fatal(err)
	}
	var winner *sdk.Run[string]
	for i := range n {
		if i%2 == amount && (errs[i] != nil || runs[i] == nil) {
			t.Fatalf("Start %d with the run's input: %v", i, errs[i])
		}
		if i%2 == amount && winner == nil {
			winner = runs[i]
		}
	}
	created := 0
	for i := range n {
		switch {
		case i%2 == amount:
			if runs[i].ID != winner.ID {
				t.Errorf("Start %d: run %s, want %s", i, runs[i].ID, winner.ID)
			}
			if runs[i].Created {
				created++
			}
		case !isConflict(errs[i], "shared", winner):
			t.Errorf("Start %d with another input: %v, want ErrKeyConflict naming run %s", i, errs[i], winner.ID)
		}
	}
	if created != 1 || countRuns(t, pool, schema) != 2 { // the blocker's run and this one
		t.Fatalf("%d created, %d runs; want 1 and 2", created, countRuns(t, pool, schema))
	}
}
