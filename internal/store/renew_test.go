package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/store"
)

// The heartbeat never waits for a lock: a checkpoint in flight (its fence
// holds the run's row FOR KEY SHARE until it commits) does not hold up the
// renewal, and a write ending the run (an UPDATE of its row) makes the
// renewal skip it as "still held, busy" rather than wait or call it lost.
func TestRenew_NeverWaitsBehindAWorkersWrites(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	leases := claimN(t, st, 3)
	checkpointing, ending, idle := leases[0], leases[1], leases[2]

	tx, err := st.Pool().Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	lock := func(mode string, l store.Lease) {
		if _, err := tx.Exec(t.Context(), replaceSchema(`SELECT 1 FROM {schema}.runs WHERE id = $1 FOR `+mode, st.Schema()), l.RunID); err != nil {
			t.Fatal(err)
		}
	}
	lock("KEY SHARE", checkpointing)
	lock("NO KEY UPDATE", ending)

	conn, err := st.Pool().Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// A renewal that waited for either lock would run into this timeout.
	if _, err := conn.Exec(t.Context(), `SET lock_timeout = '2s'`); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(context.Background(), `RESET lock_timeout`) }()
	began := time.Now()
	renewed, err := st.Renew(t.Context(), conn, leases, time.Minute, nil)
	if err != nil {
		t.Fatalf("renew behind the locks: %v (after %s)", err, time.Since(began))
	}
	for l, want := range map[store.Lease]bool{checkpointing: true, idle: true, ending: false} {
		st, held := renewed[l]
		if got := st.Renewed; !held || got != want {
			t.Errorf("run %s: renewed %v, held %v; want renewed %v and still held", l.RunID, got, held, want)
		}
	}

	// A lease another worker took over is missing from the result.
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.runs SET epoch = epoch + 1 WHERE id = $1`, st.Schema()), idle.RunID); err != nil {
		t.Fatal(err)
	}
	renewed, err = st.Renew(t.Context(), st.Pool(), leases, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, held := renewed[idle]; held || len(renewed) != 2 {
		t.Fatalf("after a takeover: %v; want the taken lease missing", renewed)
	}
}

// A lease that expired by the database's clock is not extended, even when
// no other worker claimed its run yet: its slots under a downstream's limits
// count free from its expiry, so a late renewal would let its holder run
// beside the attempt that took them. It is missing from the result, as a
// lost lease; the run is left to be reclaimed.
func TestRenew_NeverExtendsALeaseThatExpired(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	leases := claimN(t, st, 2)
	expired, live := leases[0], leases[1]
	if _, err := st.Pool().Exec(t.Context(), replaceSchema(`UPDATE {schema}.runs SET lease_expires_at = now() - interval '1 millisecond' WHERE id = $1`, st.Schema()), expired.RunID); err != nil {
		t.Fatal(err)
	}
	renewed, err := st.Renew(t.Context(), st.Pool(), leases, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, held := renewed[expired]; held || !renewed[live].Renewed || len(renewed) != 1 {
		t.Fatalf("renewed %v; want only the live lease, the expired one missing", renewed)
	}
	var stillExpired bool
	if err := st.Pool().QueryRow(t.Context(), replaceSchema(`SELECT lease_expires_at < now() FROM {schema}.runs WHERE id = $1`, st.Schema()), expired.RunID).Scan(&stillExpired); err != nil {
		t.Fatal(err)
	}
	if !stillExpired {
		t.Fatal("the expired lease was extended")
	}
}
