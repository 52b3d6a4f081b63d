package main

import (
	"path/filepath"
	"testing"

	"github.com/tenurehq/tenure/internal/snippets"
)

// TestDocs_RiverBlocksCompile compiles and vets the Go blocks of
// docs/design/river.md. They need River, which only this module requires,
// so they are checked here rather than with the other docs' blocks
// (internal/snippets, TestDocs_EveryGoBlockCompiles). A block that fails
// names its line.
func TestDocs_RiverBlocksCompile(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	snippets.Check(t, snippets.Config{
		Root:  root,
		GoMod: "examples/river/go.mod",
		GoSum: "examples/river/go.sum",
		Imports: map[string]string{
			"river":      "github.com/riverqueue/river",
			"riverpgxv5": "github.com/riverqueue/river/riverdriver/riverpgxv5",
		},
		StandIns: []string{
			`type Order struct{ ID string }`,
			"type ShipArgs struct {\n\tOrderID string `json:\"order_id\"`\n}",
			`func (ShipArgs) Kind() string { return "ship_order" }`,
			`var riverClient *river.Client[pgx.Tx]`,
			`type ShipWorker struct {
				river.WorkerDefaults[ShipArgs]
				pool   *pgxpool.Pool
				tenure *sdk.Client
			}`,
			`var NotifyShipped = sdk.NewWorkflow("notify-shipped", func(ctx context.Context, o Order) (string, error) { return "", nil })`,
		},
	}, "docs/design/river.md")
}
