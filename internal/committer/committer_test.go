package committer_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/committer"
	"github.com/tenurehq/tenure/internal/noleaks"
	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
)

func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }

// setup returns a started committer on a fresh schema and n claimed runs.
func setup(t *testing.T, n int) (*committer.Committer, *store.Store, []store.Lease) {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(pool, store.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, _, _, err := st.InsertRun(t.Context(), pool, store.NewRun{ID: uuid.New(), Workflow: "wf", Queue: "default", Input: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := st.Claim(t.Context(), []string{"wf"}, []string{"default"}, n, "w", time.Minute)
	if err != nil || len(claimed) != n {
		t.Fatalf("claimed %d of %d: %v", len(claimed), n, err)
	}
	leases := make([]store.Lease, n)
	for i, c := range claimed {
		leases[i] = store.Lease{RunID: c.ID, Epoch: c.Epoch}
	}
	c := committer.New(committer.Config{
		Store: st,
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		},
		Timeout: 10 * time.Second,
	})
	c.Start()
	t.Cleanup(c.Stop)
	return c, st, leases
}

func TestCommitter_ConcurrentWritesShareCommits(t *testing.T) {
	t.Parallel()
	c, st, leases := setup(t, 200)
	var wg sync.WaitGroup
	errs := make(chan error, len(leases))
	for _, l := range leases {
		wg.Go(func() {
			res, err := c.Write(t.Context(), store.Write{Lease: l, CompleteRun: &store.RunOutput{Output: []byte(`1`)}})
			errs <- errors.Join(err, res.Err)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var completed int
	if err := st.Pool().QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{st.Schema()}.Sanitize()+`.runs WHERE status = 'completed'`).Scan(&completed); err != nil || completed != len(leases) {
		t.Fatalf("%d runs completed, %v", completed, err)
	}
	if c.Writes() != int64(len(leases)) || c.Commits() >= c.Writes() {
		t.Fatalf("%d writes in %d commits: want them to share commits", c.Writes(), c.Commits())
	}
	t.Logf("%d writes in %d commits", c.Writes(), c.Commits())
}

func TestCommitter_OneWritesBadDataDoesNotFailTheOthers(t *testing.T) {
	t.Parallel()
	c, _, leases := setup(t, 20)
	// PostgreSQL refuses this output (jsonb cannot hold \u0000): the batch
	// that carries it rolls back whole, and the committer retries the
	// others on their own.
	bad := []byte(`"\u0000"`)
	var wg sync.WaitGroup
	results := make([]error, len(leases))
	start := make(chan struct{})
	for i, l := range leases {
		out := []byte(`1`)
		if i == 7 {
			out = bad
		}
		wg.Go(func() {
			<-start
			res, err := c.Write(t.Context(), store.Write{Lease: l, CompleteRun: &store.RunOutput{Output: out}})
			results[i] = errors.Join(err, res.Err)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range results {
		if (err != nil) != (i == 7) {
			t.Errorf("write %d: %v", i, err)
		}
	}
}

func TestCommitter_WriteAfterStopIsRefused(t *testing.T) {
	t.Parallel()
	c, _, leases := setup(t, 1)
	c.Stop()
	if _, err := c.Write(t.Context(), store.Write{Lease: leases[0], Release: &store.Release{}}); !errors.Is(err, committer.ErrStopped) {
		t.Fatalf("write after Stop: %v, want ErrStopped", err)
	}
}
