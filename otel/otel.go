package otel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/runtime"
	"github.com/tenurehq/tenure/sdk"
)

// Option configures New.
type Option func(*config)

type config struct {
	tp   trace.TracerProvider
	mp   metric.MeterProvider
	link bool
}

// WithTracerProvider traces with tp instead of the global tracer provider.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider measures with mp instead of the global meter provider.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithLinkedSegments makes each execution segment the root of a new trace,
// linked to the context captured at Start, instead of its child. Use it when
// runs live so long that one trace per run is unwieldy in your backend.
func WithLinkedSegments() Option { return func(c *config) { c.link = true } }

// Instrumentation traces and measures runs: it is a runtime.Observer and an
// sdk.StartObserver. It is safe for concurrent use.
type Instrumentation struct {
	tracer trace.Tracer
	link   bool
	prop   propagation.TraceContext
	m      instruments
}

var (
	_ runtime.Observer            = (*Instrumentation)(nil)
	_ runtime.DatabaseObserver    = (*Instrumentation)(nil)
	_ runtime.ReplicationObserver = (*Instrumentation)(nil)
	_ sdk.StartObserver           = (*Instrumentation)(nil)
)

// New returns an Instrumentation on the global providers, or those the
// options name. It fails only if a metric instrument cannot be created.
func New(opts ...Option) (*Instrumentation, error) {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	m, err := newInstruments(c.mp.Meter(instrumentation))
	if err != nil {
		return nil, fmt.Errorf("tenure otel: %w", err)
	}
	return &Instrumentation{tracer: c.tp.Tracer(instrumentation), link: c.link, m: m}, nil
}

// RunStarting opens the run's start span in the caller's trace and returns
// its traceparent, stored with the run.
func (i *Instrumentation) RunStarting(ctx context.Context, workflow string) (string, func(uuid.UUID, bool, error)) {
	ctx, span := i.tracer.Start(ctx, "start "+workflow, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(KeyWorkflow.String(workflow)))
	carrier := propagation.MapCarrier{}
	i.prop.Inject(ctx, carrier)
	return carrier.Get("traceparent"), func(id uuid.UUID, created bool, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(KeyRunID.String(id.String()), KeyRunCreated.Bool(created))
			if created {
				i.m.runsStarted.Add(ctx, 1, metric.WithAttributes(KeyWorkflow.String(workflow)))
			}
		}
		span.End()
	}
}

// SegmentStarted opens the segment's span, child of (or linked to) the
// context captured at Start.
func (i *Instrumentation) SegmentStarted(ctx context.Context, s runtime.Segment) context.Context {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(KeyRunID.String(s.RunID.String()), KeyWorkflow.String(s.Workflow),
			KeyQueue.String(s.Queue), KeyEpoch.Int64(s.Epoch), KeyWorker.String(s.Worker), KeyReclaimed.Bool(s.Reclaimed)),
	}
	parent := ctx
	if s.Traceparent != "" {
		started := i.prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": s.Traceparent})
		if sc := trace.SpanContextFromContext(started); sc.IsValid() {
			if i.link {
				opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sc}))
			} else {
				parent = trace.ContextWithRemoteSpanContext(ctx, sc)
			}
		}
	}
	ctx, _ = i.tracer.Start(parent, "run "+s.Workflow, opts...)
	wf := metric.WithAttributes(KeyWorkflow.String(s.Workflow))
	i.m.inFlight.Add(ctx, 1, wf)
	i.m.queueLag.Record(ctx, s.QueueLag.Seconds(), wf)
	return ctx
}

// SegmentEnded closes the segment's span and counts the run's outcome.
func (i *Instrumentation) SegmentEnded(ctx context.Context, s runtime.Segment, end runtime.SegmentEnd) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(KeySegment.String(end.Outcome))
	wf := KeyWorkflow.String(s.Workflow)
	switch end.Outcome {
	case runtime.SegmentCompleted:
		i.m.runsCompleted.Add(ctx, 1, metric.WithAttributes(wf))
		i.m.runDuration.Record(ctx, end.RunDuration.Seconds(), metric.WithAttributes(wf, KeySegment.String(end.Outcome)))
	case runtime.SegmentFailed:
		span.SetAttributes(KeyReason.String(string(end.Reason)))
		span.SetStatus(codes.Error, string(end.Reason)+": "+end.Error)
		i.m.failures.Add(ctx, 1, metric.WithAttributes(wf, KeyReason.String(string(end.Reason))))
		i.m.runDuration.Record(ctx, end.RunDuration.Seconds(), metric.WithAttributes(wf, KeySegment.String(end.Outcome)))
	case runtime.SegmentCancelled:
		i.m.runDuration.Record(ctx, end.RunDuration.Seconds(), metric.WithAttributes(wf, KeySegment.String(end.Outcome)))
	case runtime.SegmentAbandoned:
		span.SetStatus(codes.Error, end.Error)
	}
	i.m.inFlight.Add(ctx, -1, metric.WithAttributes(wf))
	span.End()
}

// AttemptStarted opens the attempt's span, named after its activity, linked
// to the step's previous attempt.
func (i *Instrumentation) AttemptStarted(ctx context.Context, a runtime.Attempt) (context.Context, runtime.TraceRef) {
	opts := []trace.SpanStartOption{trace.WithAttributes(attemptAttributes(a)...)}
	if sc, ok := spanContext(a.Previous); ok {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := i.tracer.Start(ctx, a.Activity, opts...)
	switch {
	case a.Rescue && a.Downstream != "":
		// It may yet be denied by a limit: counted once admitted.
		ctx = context.WithValue(ctx, rescueKey{}, rescue{workflow: a.Workflow, activity: a.Activity})
	case a.Rescue:
		i.m.rescues.Add(ctx, 1, metric.WithAttributes(KeyWorkflow.String(a.Workflow), KeyActivity.String(a.Activity)))
	}
	return ctx, ref(span.SpanContext())
}

// AttemptEnded closes the attempt's span with its outcome and counts it.
// An attempt a downstream's limit denied (runtime.AttemptThrottled) was
// never made: its span ends without an error and it is not counted (Denied
// counted it in tenure.flow.denied).
func (i *Instrumentation) AttemptEnded(ctx context.Context, a runtime.Attempt, end runtime.AttemptEnd) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(KeyOutcome.String(string(end.Outcome)))
	if end.Outcome == runtime.AttemptThrottled {
		span.End()
		return
	}
	if end.Delay != nil {
		span.SetAttributes(KeyDelay.Int64(end.Delay.Milliseconds()), KeyDelaySource.String(end.DelaySource))
		i.m.retries.Add(ctx, 1, metric.WithAttributes(KeyWorkflow.String(a.Workflow), KeyActivity.String(a.Activity), KeyDelaySource.String(end.DelaySource)))
	}
	if end.GaveUp != "" {
		span.SetAttributes(KeyGaveUp.String(string(end.GaveUp)))
	}
	if end.Err != nil {
		span.SetAttributes(KeyErrorType.String(fmt.Sprintf("%T", end.Err)))
		span.RecordError(end.Err)
		span.SetStatus(codes.Error, end.Err.Error())
	} else if end.Outcome == record.AttemptLost {
		span.SetStatus(codes.Error, "lease lost during the attempt: its result was discarded")
	}
	span.End()
	if end.Outcome == record.AttemptLost {
		// The worker that rescues the run counts it (AttemptLost), also when
		// this worker never wakes up to report it: count each attempt once.
		return
	}
	attrs := metric.WithAttributes(KeyWorkflow.String(a.Workflow), KeyActivity.String(a.Activity), KeyOutcome.String(string(end.Outcome)))
	i.m.attempts.Add(ctx, 1, attrs)
	i.m.attemptDuration.Record(ctx, end.Duration.Seconds(), attrs)
}

// AttemptLost gives a lost attempt its span when the rescue finds it, from
// its original start time to now, linked to the span its worker recorded.
func (i *Instrumentation) AttemptLost(ctx context.Context, a runtime.Attempt, startedAt time.Time, recorded runtime.TraceRef) {
	opts := []trace.SpanStartOption{
		trace.WithTimestamp(startedAt),
		trace.WithAttributes(attemptAttributes(a)...),
		trace.WithAttributes(KeyOutcome.String(string(record.AttemptLost)), KeyRecordedSpan.String(recorded.SpanID)),
	}
	if sc, ok := spanContext(recorded); ok {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	_, span := i.tracer.Start(ctx, a.Activity, opts...)
	span.SetStatus(codes.Error, "attempt lost: its worker died, froze or was cut off while it ran")
	span.End()
	attrs := metric.WithAttributes(KeyWorkflow.String(a.Workflow), KeyActivity.String(a.Activity), KeyOutcome.String(string(record.AttemptLost)))
	i.m.attempts.Add(ctx, 1, attrs)
	i.m.attemptDuration.Record(ctx, time.Since(startedAt).Seconds(), attrs)
}

// LeaseLost counts a lost lease and marks it on the segment's span.
func (i *Instrumentation) LeaseLost(ctx context.Context, s runtime.Segment) {
	trace.SpanFromContext(ctx).AddEvent("tenure.lease.lost", trace.WithAttributes(KeyEpoch.Int64(s.Epoch)))
	i.m.leasesLost.Add(ctx, 1, metric.WithAttributes(KeyWorkflow.String(s.Workflow)))
}

// DatabaseError counts a database error of a worker (runtime.DatabaseObserver):
// by path and SQLSTATE, so that an alert can tell an outage (no SQLSTATE)
// from a refusal (42501 permission denied, 53100 disk full).
func (i *Instrumentation) DatabaseError(path string, err error) {
	attrs := []attribute.KeyValue{KeyDBPath.String(path)}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		attrs = append(attrs, KeyDBState.String(pgErr.Code))
	}
	i.m.dbErrors.Add(context.Background(), 1, metric.WithAttributes(attrs...))
}

// ReplicationChecked records whether the worker's commits are replicated
// asynchronously (runtime.ReplicationObserver): the gauge
// tenure.database.replication.asynchronous, with the mode.
func (i *Instrumentation) ReplicationChecked(r record.Replication) {
	var async int64
	if r.Mode == record.ReplicationAsynchronous {
		async = 1
	}
	i.m.replicationAsync.Record(context.Background(), async, metric.WithAttributes(KeyReplicationMode.String(string(r.Mode))))
}

func attemptAttributes(a runtime.Attempt) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		KeyRunID.String(a.RunID.String()), KeyWorkflow.String(a.Workflow), KeyActivity.String(a.Activity),
		KeyStep.Int(a.Step), KeyAttempt.Int(a.Attempt), KeyMaxAttempts.Int(a.MaxAttempts),
		KeyErrors.Int(a.Errors), KeyRescues.Int(a.Rescues), KeyRescue.Bool(a.Rescue),
		KeyEpoch.Int64(a.Epoch), KeyWorker.String(a.Worker),
	}
	if a.Downstream != "" {
		attrs = append(attrs, KeyDownstream.String(a.Downstream))
	}
	return attrs
}

// ref names a span for the attempts table; empty when it is not recorded.
func ref(sc trace.SpanContext) runtime.TraceRef {
	if !sc.IsValid() {
		return runtime.TraceRef{}
	}
	return runtime.TraceRef{TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String()}
}

// spanContext rebuilds a span context from a stored reference, for links.
func spanContext(r runtime.TraceRef) (trace.SpanContext, bool) {
	tid, err1 := trace.TraceIDFromHex(r.TraceID)
	sid, err2 := trace.SpanIDFromHex(r.SpanID)
	if err1 != nil || err2 != nil {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}), true
}
