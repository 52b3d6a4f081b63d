package otel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/runtime"
)

var _ runtime.FlowObserver = (*Instrumentation)(nil)

// Admitted counts an attempt admitted under downstream's limits
// (runtime.FlowObserver); a rescue of a step that calls a downstream is
// counted in tenure.rescues here, once it is known to start.
func (i *Instrumentation) Admitted(ctx context.Context, downstream string) {
	i.m.flowAdmitted.Add(ctx, 1, metric.WithAttributes(KeyDownstream.String(downstream)))
	if r, ok := ctx.Value(rescueKey{}).(rescue); ok {
		i.m.rescues.Add(ctx, 1, metric.WithAttributes(KeyWorkflow.String(r.workflow), KeyActivity.String(r.activity)))
	}
}

// Denied counts an attempt that downstream's limit denied, by cause, and
// says so on the attempt's span: an event tenure.flow.denied and the
// attribute tenure.flow.cause. The span then ends with outcome throttled
// (AttemptEnded), without an error: waiting on a limit is no failure.
func (i *Instrumentation) Denied(ctx context.Context, downstream, cause string) {
	attrs := []attribute.KeyValue{KeyDownstream.String(downstream), KeyFlowCause.String(cause)}
	i.m.flowDenied.Add(ctx, 1, metric.WithAttributes(attrs...))
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(KeyFlowCause.String(cause))
	span.AddEvent("tenure.flow.denied", trace.WithAttributes(attrs...))
}

// DownstreamState records a downstream's gauges (runtime.FlowObserver):
// the steps waiting on it, the concurrency slots in use and its breaker.
func (i *Instrumentation) DownstreamState(downstream, breaker string, waiting, inUse int64) {
	ctx, attrs := context.Background(), metric.WithAttributes(KeyDownstream.String(downstream))
	i.m.flowWaiting.Record(ctx, waiting, attrs)
	i.m.flowInUse.Record(ctx, inUse, attrs)
	i.m.flowBreaker.Record(ctx, breakerValue(breaker), attrs)
}

// breakerValue is a breaker's state as tenure.flow.breaker's value: 0
// closed, 1 half open, 2 open (so that "above 0" is "not closed").
func breakerValue(state string) int64 {
	switch state {
	case flow.BreakerOpen:
		return 2
	case flow.BreakerHalfOpen:
		return 1
	}
	return 0
}

// rescueKey marks the context of a rescue attempt whose step calls a
// downstream: it is counted when admitted (Admitted), not when it may
// still be denied (AttemptStarted), so that a rescue denied five times by
// a concurrency limit counts once.
type rescueKey struct{}

type rescue struct{ workflow, activity string }
