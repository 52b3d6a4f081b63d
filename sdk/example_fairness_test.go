package sdk_test

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// Report is a tenant's report job.
type Report struct{ Tenant string }

// WithFairness shares a queue between tenants: the one that enqueued six
// reports first does not make the other's two wait for all of them.
func ExampleWithFairness() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	var mu sync.Mutex
	var order []string
	report := sdk.NewWorkflow("report", func(ctx context.Context, in Report) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, in.Tenant)
		return "done", nil
	})
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	var runs []*sdk.Run[string]
	for _, tenant := range []string{"big", "big", "big", "big", "big", "big", "small", "small"} {
		run, err := sdk.Start(ctx, client, report, Report{tenant}, sdk.WithFairnessKey(tenant))
		if err != nil {
			panic(err)
		}
		runs = append(runs, run)
	}
	_, err = sdk.Start(ctx, client, report, Report{"x"}, sdk.WithFairness("", 2))
	fmt.Println(err)

	cfg := testWorker(schema)
	cfg.Concurrency = 1 // one run at a time, to show the order
	w, err := runtime.NewWorker(pool, cfg)
	if err != nil {
		panic(err)
	}
	_ = w.Register(report)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)
	for _, run := range runs {
		if _, err := run.Result(ctx); err != nil {
			panic(err)
		}
	}
	fmt.Println(strings.Join(order, " "))
	// Output:
	// start report: empty fairness key (weight 2)
	// big small big small big big big big
}
