package sdk_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// A schedule starts a run of its workflow at each tick: here every second,
// with the input it was declared with. A worker registers it, and any
// worker decides its ticks, each once.
func ExampleNewSchedule() {
	pool, schema, closeDB := exampledb.Open()
	defer closeDB()
	ctx := context.Background()

	ran := make(chan string, 10)
	heartbeat := sdk.NewWorkflow("heartbeat", func(ctx context.Context, n int) (int, error) {
		name, nominal, _ := sdk.ScheduledTick(ctx)
		ran <- fmt.Sprintf("%d from %s, a tick on a whole second: %t", n, name, nominal.Equal(nominal.Truncate(time.Second)))
		return n, nil
	})
	every := sdk.NewSchedule("heartbeat-every-second", heartbeat, "@every 1s", 42,
		sdk.WithOverlap(sdk.OverlapSkip, 0))

	w, err := runtime.NewWorker(pool, testWorker(schema))
	if err != nil {
		panic(err)
	}
	_ = w.Register(heartbeat)
	if err := w.RegisterSchedules(every); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)
	fmt.Println(<-ran)
	// Output:
	// 42 from heartbeat-every-second, a tick on a whole second: true
}
