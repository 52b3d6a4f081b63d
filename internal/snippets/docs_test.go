package snippets_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/snippets"
)

// elsewhere are the Markdown files whose Go blocks other tests check, each
// in the module its blocks need.
var elsewhere = map[string]string{
	// A module example.com/shop of its own, whose tests run.
	"docs/testing.md": "TestDocs_TestingGuideRunsAsWritten in tenuretest",
	// River is a requirement of examples/river only, not of the core module.
	"docs/design/river.md": "TestDocs_RiverBlocksCompile in examples/river",
	// The adapter's guide needs River and the riveradapter module.
	"docs/river.md": "TestDocs_AdapterBlocksCompile in riveradapter",
}

// standIns are what the fragments of the docs use without declaring it.
var standIns = []string{
	// README.md
	`type ChargeIn struct{ Amount int }`,
	`type Receipt struct{ ID string }`,
	`type OrderIn struct {
		OrderID string
		Amount  int
	}`,
	`type OrderOut struct{ Receipt Receipt }`,
	`var payments struct {
		Charge func(ctx context.Context, in ChargeIn, key string) (Receipt, error)
	}`,
	`var FindCharge = activities.New("find-charge", func(ctx context.Context, orderID string) (Receipt, error) { return Receipt{}, nil })`,
	`var PlaceOrder = sdk.NewWorkflow("place-order", func(ctx context.Context, in OrderIn) (OrderOut, error) { return OrderOut{}, nil })`,
	// docs/semantics.md
	`type Order struct {
		ID     string
		Amount int
	}`,
	`var Charge = activities.New("charge", func(ctx context.Context, o Order) (Receipt, error) { return Receipt{}, nil })`,
	`var FindPayment = activities.New("find-payment", func(ctx context.Context, id string) (Receipt, error) { return Receipt{}, nil })`,
	`type Declined struct{ Code string }`,
	`func (d *Declined) Error() string { return d.Code }`,
	`func checkout(ctx context.Context, o Order) (Receipt, error) { return Receipt{}, nil }`,
	// docs/deploying.md
	`var FraudCheck = activities.New("fraud-check", func(ctx context.Context, o Order) (bool, error) { return true, nil })`,
	// docs/fairness.md
	`type ReportIn struct{ TenantID string }`,
	`var Report = sdk.NewWorkflow("report", func(ctx context.Context, in ReportIn) (string, error) { return "", nil })`,
	`var in ReportIn`,
	// Statement blocks: what a program has at hand.
	`var pool *pgxpool.Pool`,
	`var w *runtime.Worker`,
	`var client *sdk.Client`,
}

// TestDocs_EveryGoBlockCompiles compiles and vets every Go block of the
// Markdown files of the checkout, but those that elsewhere names, so that
// the docs show code that builds against today's API. A block that fails
// names its file and line.
func TestDocs_EveryGoBlockCompiles(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		md, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if len(snippets.Extract(rel, md)) > 0 {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for file, test := range elsewhere {
		if !slices.Contains(files, file) {
			t.Errorf("%s has no Go block for %s to check: update elsewhere", file, test)
		}
	}
	files = slices.DeleteFunc(files, func(f string) bool { return elsewhere[f] != "" })
	for _, want := range []string{"README.md", "docs/getting-started.md", "docs/semantics.md"} {
		if !slices.Contains(files, want) {
			t.Fatalf("%s is not among the files checked (%v): the walk is broken", want, files)
		}
	}
	snippets.Check(t, snippets.Config{Root: root, GoMod: "go.mod", GoSum: "go.sum", StandIns: standIns}, files...)
}
