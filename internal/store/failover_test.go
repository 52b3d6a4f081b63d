package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
)

// storeOn migrates and returns a store on a new pool to url.
func storeOn(t *testing.T, url string) *store.Store {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A claim that a failover loses (the asynchronous standby had not received
// it) never hands its epoch to the next claimer: the worker that made it,
// reconnected to the promoted standby, is fenced out.
func TestFailover_AClaimLostByAFailoverIsNeverIssuedAgain(t *testing.T) {
	t.Parallel()
	rep := pgtest.Replicate(t, false)
	primary := storeOn(t, rep.PrimaryURL())
	run := store.NewRun{ID: uuid.New(), Workflow: "wf", Queue: "default", Input: []byte(`{}`)}
	if _, _, _, err := primary.InsertRun(t.Context(), primary.Pool(), run); err != nil {
		t.Fatal(err)
	}
	// A first claim and its lease's end, replicated: the run's epoch is
	// the same on both servers.
	first, err := primary.Claim(t.Context(), []string{"wf"}, []string{"default"}, 1, "a", time.Minute)
	if err != nil || len(first) != 1 {
		t.Fatalf("first claim: %v, %v", first, err)
	}
	if res, err := primary.Commit(t.Context(), primary.Pool(), []store.Write{{Lease: store.Lease{RunID: run.ID, Epoch: first[0].Epoch},
		Release: &store.Release{}}}); err != nil || res[0].Err != nil {
		t.Fatalf("release: %v %+v", err, res)
	}
	if err := rep.WaitCaughtUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := rep.CutReplication(); err != nil {
		t.Fatal(err)
	}
	// Worker A's claim: committed on the primary, never received.
	lost, err := primary.Claim(t.Context(), []string{"wf"}, []string{"default"}, 1, "a", time.Minute)
	if err != nil || len(lost) != 1 {
		t.Fatalf("claim before the failover: %v, %v", lost, err)
	}
	if err := rep.StopPrimary("immediate"); err != nil {
		t.Fatal(err)
	}
	if err := rep.Promote(); err != nil {
		t.Fatal(err)
	}
	promoted := storeOn(t, rep.StandbyURL())
	taken, err := promoted.Claim(t.Context(), []string{"wf"}, []string{"default"}, 1, "b", time.Minute)
	if err != nil || len(taken) != 1 {
		t.Fatalf("claim after the failover: %v, %v", taken, err)
	}
	if taken[0].Epoch <= lost[0].Epoch {
		t.Fatalf("epoch %d issued after the failover, %d by the lost claim: want a larger one, never the same", taken[0].Epoch, lost[0].Epoch)
	}
	// Worker A, reconnected, writes under its lost epoch: refused.
	start := func(epoch int64) error {
		res, err := promoted.Commit(t.Context(), promoted.Pool(), []store.Write{{Lease: store.Lease{RunID: run.ID, Epoch: epoch},
			StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "x", Policy: []byte(`{}`), Worker: "w"}}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Err
	}
	if err := start(lost[0].Epoch); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("a write under the lost claim's epoch after the failover: %v, want ErrLeaseLost", err)
	}
	if err := start(taken[0].Epoch); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
}

// The store reads what a failover of each deployment can cost: a server
// with a synchronous standby, one with an asynchronous standby, and a
// standby itself.
func TestReplication_EachDeploymentIsToldApart(t *testing.T) {
	t.Parallel()
	for _, sync := range []bool{true, false} {
		rep := pgtest.Replicate(t, sync)
		want := store.ReplicationAsynchronous
		if sync {
			want = store.ReplicationSynchronous
		}
		st := storeOn(t, rep.PrimaryURL())
		r, err := st.ReadReplication(t.Context(), st.Pool())
		if err != nil || r.Mode != want || r.Standbys != 1 {
			t.Fatalf("sync %v: %+v, %v; want %s with 1 standby", sync, r, err, want)
		}
		// Commits of a session that does not wait are asynchronous.
		if sync {
			cfg, err := pgxpool.ParseConfig(rep.PrimaryURL())
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "local"
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			local, err := st.ReadReplication(t.Context(), pool)
			pool.Close()
			if err != nil || local.Mode != store.ReplicationAsynchronous {
				t.Fatalf("synchronous_commit = local: %+v, %v; want asynchronous", local, err)
			}
		}
		if sync {
			continue
		}
		if err := rep.WaitCaughtUp(t.Context()); err != nil { // the schema is there
			t.Fatal(err)
		}
		conn, err := pgx.Connect(t.Context(), rep.StandbyURL())
		if err != nil {
			t.Fatal(err)
		}
		r, err = st.ReadReplication(t.Context(), conn)
		_ = conn.Close(context.Background())
		if err != nil || r.Mode != store.ReplicationStandby {
			t.Fatalf("on the standby: %+v, %v; want standby", r, err)
		}
	}
}

// A write that a server refuses as read-only (25006: it was made a standby,
// or read-only for a switchover) drops the pool's connections, so that the
// next ones follow target_session_attrs=read-write to the new primary
// rather than asking the old one for ever.
func TestFailover_AReadOnlyAnswerDropsThePoolsConnectionsToReachTheNewPrimary(t *testing.T) {
	t.Parallel()
	rep := pgtest.Replicate(t, true)
	st := storeOn(t, rep.URL())
	insert := func() error {
		_, _, _, err := st.InsertRun(t.Context(), st.Pool(), store.NewRun{ID: uuid.New(), Workflow: "wf", Queue: "default", Input: []byte(`{}`)})
		return err
	}
	if err := insert(); err != nil {
		t.Fatal(err)
	}
	// A switchover: the primary is made read-only, its standby promoted.
	// The pool's connections, to the old primary, stay open.
	old, err := pgx.Connect(t.Context(), rep.PrimaryURL())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(context.Background())
	if _, err := old.Exec(t.Context(), `ALTER SYSTEM SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(t.Context(), `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	if err := rep.Promote(); err != nil {
		t.Fatal(err)
	}
	err = insert()
	var tries int
	for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); tries++ {
		time.Sleep(100 * time.Millisecond)
		err = insert()
	}
	if err != nil {
		t.Fatalf("inserts after the switchover: %v; want the pool to reach the promoted standby", err)
	}
	if tries > 3 {
		t.Fatalf("%d inserts refused after the switchover: the pool kept its connections to the read-only server", tries)
	}
	var standby bool
	if err := st.Pool().QueryRow(t.Context(), `SELECT pg_catalog.pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'`).Scan(&standby); err != nil || standby {
		t.Fatalf("the pool's connection after the switchover: read-only %v, %v", standby, err)
	}
}
