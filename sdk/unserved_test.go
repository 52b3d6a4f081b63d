package sdk_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

// Start warns, once per workflow and queue and minute, when no live worker
// serves the workflow: its runs would wait for one unnoticed.
func TestStart_WarnsWhenNoLiveWorkerServesTheWorkflow(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema), sdk.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	lonely := sdk.NewWorkflow("lonely", func(ctx context.Context, n int) (int, error) { return n, nil })
	for range 3 {
		if _, err := sdk.Start(t.Context(), client, lonely, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sdk.StartMany(t.Context(), client, lonely, []sdk.StartParams[int]{{Input: 1, Options: []sdk.StartOption{sdk.WithQueue("other")}}}); err != nil {
		t.Fatal(err)
	}
	// A workflow a live worker serves is not warned about.
	served := sdk.NewWorkflow("served", func(ctx context.Context, n int) (int, error) { return n, nil })
	w, err := runtime.NewWorker(pool, runtime.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(served); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(context.Background())
	if _, err := sdk.Start(t.Context(), client, served, 1); err != nil {
		t.Fatal(err)
	}
	got := logs.String()
	if n := strings.Count(got, "no live worker serves this workflow"); n != 2 ||
		!strings.Contains(got, "workflow=lonely queue=default") || !strings.Contains(got, "workflow=lonely queue=other") {
		t.Fatalf("logs:\n%s\nwant one warning per queue of the workflow no worker serves, none for the served one", got)
	}
}
