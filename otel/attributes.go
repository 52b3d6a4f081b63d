package otel

import "go.opentelemetry.io/otel/attribute"

// Attribute keys on Tenure's spans and metrics, in the tenure.* namespace.
const (
	KeyRunID           = attribute.Key("tenure.run.id")
	KeyWorkflow        = attribute.Key("tenure.workflow")
	KeyQueue           = attribute.Key("tenure.queue")
	KeyActivity        = attribute.Key("tenure.activity")
	KeyStep            = attribute.Key("tenure.step")
	KeyAttempt         = attribute.Key("tenure.attempt")
	KeyMaxAttempts     = attribute.Key("tenure.attempt.max")
	KeyErrors          = attribute.Key("tenure.attempt.errors_before")
	KeyRescues         = attribute.Key("tenure.attempt.rescues_before")
	KeyRescue          = attribute.Key("tenure.attempt.rescue")
	KeyOutcome         = attribute.Key("tenure.attempt.outcome")
	KeyDelay           = attribute.Key("tenure.retry.delay_ms")
	KeyDelaySource     = attribute.Key("tenure.retry.delay_source")
	KeyGaveUp          = attribute.Key("tenure.step.gave_up")
	KeyEpoch           = attribute.Key("tenure.lease.epoch")
	KeyWorker          = attribute.Key("tenure.worker")
	KeyReclaimed       = attribute.Key("tenure.segment.reclaimed")
	KeySegment         = attribute.Key("tenure.segment.outcome")
	KeyReason          = attribute.Key("tenure.failure.reason")
	KeyRecordedSpan    = attribute.Key("tenure.attempt.recorded_span_id")
	KeyRunCreated      = attribute.Key("tenure.run.created")
	KeyDBPath          = attribute.Key("tenure.database.path")     // claim runs, renew leases, write runs
	KeyDBState         = attribute.Key("db.response.status_code")  // SQLSTATE; absent when no server answered
	KeyReplicationMode = attribute.Key("tenure.replication.mode")  // none, synchronous, asynchronous, standby
	KeyErrorType       = attribute.Key("error.type")               // the OpenTelemetry standard key
	KeyDownstream      = attribute.Key("tenure.downstream")        // the flow.Downstream an activity calls
	KeyFlowCause       = attribute.Key("tenure.flow.cause")        // concurrency, rate, breaker, retry-budget
	KeyBuild           = attribute.Key("tenure.build")             // the build orphaned runs are pinned to (sdk.WithPinning)
	KeySchedule        = attribute.Key("tenure.schedule")          // a schedule's name
	KeyTickDecision    = attribute.Key("tenure.schedule.decision") // started, skipped, missed, buffered
	instrumentation    = "github.com/tenurehq/tenure/otel"
)
