package sdk_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/sdk"
)

// A key names one start of one input. Starting it again with the same input
// returns the run it started; with another input is a mistake that Start
// reports with ErrKeyConflict (the error names the key and the run) instead
// of returning a run that does something else.
func ExampleErrKeyConflict() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()
	client, err := sdk.NewClient(pool, sdk.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	first, err := sdk.Start(ctx, client, Fulfil, OrderIn{ID: "C-1", Amount: 100}, sdk.WithKey("order-C-1"))
	if err != nil {
		panic(err)
	}
	again, err := sdk.Start(ctx, client, Fulfil, OrderIn{ID: "C-1", Amount: 100}, sdk.WithKey("order-C-1"))
	fmt.Println("same input:", again.ID == first.ID, again.Created, err)

	_, err = sdk.Start(ctx, client, Fulfil, OrderIn{ID: "C-1", Amount: 250}, sdk.WithKey("order-C-1"))
	fmt.Println("other input:", errors.Is(err, sdk.ErrKeyConflict))
	// Output:
	// same input: true false <nil>
	// other input: true
}
