package otel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	tenureotel "github.com/tenurehq/tenure/otel"
	"github.com/tenurehq/tenure/sdk"
)

// The orphan gauge counts the queued runs of a workflow no live worker
// serves, per workflow and queue.
func TestObserveOrphans_CountsRunsNoWorkerServes(t *testing.T) {
	e := newEnv(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	reg, err := tenureotel.ObserveOrphans(e.op, tenureotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Unregister() })
	nobody := sdk.NewWorkflow("nobody", func(ctx context.Context, n int) (int, error) { return n, nil })
	for range 3 {
		if _, err := sdk.Start(t.Context(), e.client, nobody, 1); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != tenureotel.MetricRunsOrphaned {
				continue
			}
			g := m.Data.(metricdata.Gauge[int64])
			if len(g.DataPoints) != 1 || g.DataPoints[0].Value != 3 {
				t.Fatalf("gauge points %+v, want one of 3", g.DataPoints)
			}
			if wf, _ := g.DataPoints[0].Attributes.Value(attribute.Key("tenure.workflow")); wf.AsString() != "nobody" {
				t.Fatalf("attributes %v", g.DataPoints[0].Attributes)
			}
			return
		}
	}
	t.Fatalf("no %s in %+v", tenureotel.MetricRunsOrphaned, rm)
}
