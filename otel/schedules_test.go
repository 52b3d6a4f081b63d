package otel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	tenureotel "github.com/tenurehq/tenure/otel"
)

// Each tick a worker decides is counted by decision, its lag recorded.
func TestSchedules_TicksAreCountedByDecisionAndTheirLagRecorded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	inst, err := tenureotel.New(tenureotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	inst.TickDecided("nightly", "missed", 2*time.Minute)
	inst.TickDecided("nightly", "started", 3*time.Millisecond)
	inst.TickDecided("nightly", "started", 5*time.Millisecond)
	if n, _ := point(t, reader, tenureotel.MetricScheduleTicks, tenureotel.KeyTickDecision.String("started"),
		tenureotel.KeySchedule.String("nightly")); n != 2 {
		t.Fatalf("started ticks: %d, want 2", n)
	}
	if n, _ := point(t, reader, tenureotel.MetricScheduleTicks, tenureotel.KeyTickDecision.String("missed")); n != 1 {
		t.Fatalf("missed ticks: %d, want 1", n)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == tenureotel.MetricScheduleLag {
				if len(h.DataPoints) != 1 || h.DataPoints[0].Count != 3 || h.DataPoints[0].Sum < 120 {
					t.Fatalf("lag histogram: %+v", h.DataPoints)
				}
				return
			}
		}
	}
	t.Fatalf("no %s histogram", tenureotel.MetricScheduleLag)
}
