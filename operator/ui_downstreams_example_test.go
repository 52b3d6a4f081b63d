package operator_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
)

// The web UI's Downstreams page reads a downstream's limits and breaker and
// changes them through the SQL functions that audit every change: here the
// payments API's concurrency is raised during an incident, its breaker
// opened by hand, and both changes read back with the note given.
func ExampleOperator_UISetLimits() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	// What a worker whose code calls flow.New("payments", flow.Concurrency(2)) writes.
	if _, err := pool.Exec(ctx, `SELECT `+pgx.Identifier{schema}.Sanitize()+`.declare_downstream('payments', '{"concurrency": 2}', 'worker-1')`); err != nil {
		panic(err)
	}
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}

	now, err := op.UISetLimits(ctx, "payments", operator.UILimitsChange{SetConcurrency: true, Concurrency: 5,
		SetRate: true, Rate: &flow.RateLimit{N: 10, Per: time.Second, Burst: 2}}, "ui:alice: INC-7")
	if err != nil {
		panic(err)
	}
	fmt.Println(now)
	if err := op.UIOpenBreaker(ctx, "payments", "ui:alice: INC-7, the bank is down"); err != nil {
		panic(err)
	}
	list, _ := op.UIDownstreams(ctx)
	for _, d := range list {
		fmt.Println(d.Name, d.Breaker, "by hand:", d.BreakerManual, "overridden:", d.OverriddenAt != nil)
	}
	changes, _ := op.UILimitChanges(ctx, "payments", 0)
	for _, c := range changes {
		fmt.Printf("%s: %v, %q\n", c.By, c.After, c.Note)
	}
	breaker, _ := op.UIBreakerHistory(ctx, "payments", 0)
	fmt.Printf("%s -> %s by %s: %s\n", breaker[0].From, breaker[0].To, breaker[0].By, breaker[0].Why)
	// Output:
	// concurrency 5, rate 10/1s burst 2
	// payments open by hand: true overridden: true
	// person: concurrency 5, rate 10/1s burst 2, "ui:alice: INC-7"
	// declaration by worker-1: concurrency 2, ""
	// closed -> open by person: ui:alice: INC-7, the bank is down
}
