package sdk_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// Trip is what PlanTrip plans.
type Trip struct {
	Flight string
	Nights int
}

// QuoteHotel prices the hotel for the trip's nights.
var QuoteHotel = activities.New("quote-hotel", func(ctx context.Context, t Trip) (int, error) {
	return 90 * t.Nights, nil
})

// BookFlight always finds the flight full.
var BookFlight = activities.New("book-flight", func(ctx context.Context, t Trip) (string, error) {
	// Permanent: retrying cannot help, so the step gives up at once.
	return "", policy.Permanent(fmt.Errorf("flight %s: no seats left", t.Flight))
})

// PlanTrip calls two activities: each call of Execute is a step of the run,
// checkpointed before the next one starts.
var PlanTrip = sdk.NewWorkflow("plan-trip", func(ctx context.Context, t Trip) (string, error) {
	hotel, err := sdk.Execute(ctx, QuoteHotel, t)
	if err != nil {
		return "", err
	}
	ticket, err := sdk.Execute(ctx, BookFlight, t)
	var gaveUp *sdk.ActivityError
	if errors.As(err, &gaveUp) {
		// The workflow decides what a step that gave up means for the run.
		return fmt.Sprintf("hotel %d, no flight: step %d (%s) gave up, %s: %s",
			hotel, gaveUp.Step, gaveUp.Activity, gaveUp.Reason, gaveUp.Message), nil
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("hotel %d, ticket %s", hotel, ticket), nil
})

// Execute runs an activity as the next step of the run and returns its
// output, or an *sdk.ActivityError once the step gives up. Outside a
// workflow run there is no step to record, and Execute refuses.
func ExampleExecute() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	w, err := runtime.NewWorker(pool, testWorker(schema))
	if err != nil {
		panic(err)
	}
	if err := w.Register(PlanTrip); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	run, err := sdk.Start(ctx, client, PlanTrip, Trip{Flight: "LH 454", Nights: 3})
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Result(ctx))

	_, err = sdk.Execute(ctx, QuoteHotel, Trip{Nights: 1})
	fmt.Println(errors.Is(err, sdk.ErrNotInWorkflow))
	// Output:
	// hotel 270, no flight: step 2 (book-flight) gave up, non_retryable: flight LH 454: no seats left <nil>
	// true
}
