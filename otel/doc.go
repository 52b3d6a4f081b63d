// Package otel traces and measures Tenure runs with OpenTelemetry.
//
// One value, made by New, is both a runtime.Observer (set it as
// runtime.Config.Observer) and an sdk.StartObserver (pass
// sdk.WithStartObserver to sdk.NewClient). It uses the global tracer and
// meter providers unless told otherwise; this package depends only on the
// OpenTelemetry API, and the SDK is the application's choice.
//
// # Traces
//
// Start opens a short producer span ("start <workflow>") in the caller's
// trace and stores its W3C traceparent on the run. Every execution segment of
// the run (one worker holding its lease, until it completes, fails, suspends,
// is handed over or loses the lease) is a span, "run <workflow>", child of
// that context, so a run that suspended for an hour and resumed on another
// worker is still one trace (WithLinkedSegments makes each segment a new
// trace linked to it instead).
//
// Each attempt is a span named after its activity, child of its segment, with
// a link to the previous attempt of the same step. The activity's context
// carries the attempt span, so the activity's own HTTP and SQL spans nest
// under it. An attempt that ended in an error records the error as an event
// and has status Error. An attempt whose worker died is found lost by the
// worker that rescues the run: it gets a span then, starting at the attempt's
// original start time, so the trace shows the gap honestly.
//
// The attempts table stores each attempt's trace and span IDs, so SQL finds
// the trace of any failure and a trace finds its rows. Attribute and metric
// names are listed in docs/observability.md.
//
// # Flow control
//
// The Instrumentation is also a runtime.FlowObserver. An attempt of an
// activity that calls a downstream (package flow) carries the attribute
// tenure.downstream. An attempt that the downstream's limits deny is not an
// attempt: its span ends with outcome throttled, the event
// tenure.flow.denied and the attribute tenure.flow.cause, without an error,
// and it is counted in tenure.flow.denied, never in tenure.attempts. The
// gauges tenure.flow.waiting, tenure.flow.in_use and tenure.flow.breaker
// follow each downstream as the worker's sweep reads it, once a second.
package otel
