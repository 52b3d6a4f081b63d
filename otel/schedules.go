package otel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tenurehq/tenure/runtime"
)

var _ runtime.ScheduleObserver = (*Instrumentation)(nil)

// TickDecided counts a schedule's tick a worker decided, by decision, and
// records its lag (runtime.ScheduleObserver).
func (i *Instrumentation) TickDecided(schedule, decision string, lag time.Duration) {
	ctx := context.Background()
	i.m.scheduleTicks.Add(ctx, 1, metric.WithAttributes(KeySchedule.String(schedule), KeyTickDecision.String(decision)))
	i.m.scheduleLag.Record(ctx, max(lag, 0).Seconds(), metric.WithAttributes(KeySchedule.String(schedule)))
}
