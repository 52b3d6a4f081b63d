package otel

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tenurehq/tenure/operator"
)

// MetricRunsOrphaned is the gauge ObserveOrphans registers.
const MetricRunsOrphaned = "tenure.runs.orphaned"

// ObserveOrphans registers the gauge tenure.runs.orphaned: per workflow and
// queue (and build, tenure.build, for runs pinned to one), the queued runs
// that no live worker serves (record.Orphans, the orphaned_runs view), read
// at each collection with one query. A run
// nobody serves waits forever; alert on this gauge above zero. Only the
// meter provider option applies. Unregister the returned registration when
// op's pool closes.
func ObserveOrphans(op *operator.Operator, opts ...Option) (metric.Registration, error) {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	m := c.mp.Meter(instrumentation)
	g, err := m.Int64ObservableGauge(MetricRunsOrphaned, metric.WithUnit("{run}"),
		metric.WithDescription("queued runs of a workflow and queue that no live worker serves"))
	if err != nil {
		return nil, fmt.Errorf("tenure otel: %w", err)
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		orphans, err := op.Orphans(ctx)
		if err != nil {
			return fmt.Errorf("tenure otel: read orphaned runs: %w", err)
		}
		for _, x := range orphans {
			attrs := []attribute.KeyValue{KeyWorkflow.String(x.Workflow), KeyQueue.String(x.Queue)}
			if x.Build != "" {
				attrs = append(attrs, KeyBuild.String(x.Build))
			}
			o.ObserveInt64(g, int64(x.Runs), metric.WithAttributes(attrs...))
		}
		return nil
	}, g)
}
