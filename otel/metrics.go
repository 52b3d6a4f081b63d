package otel

import (
	"errors"

	"go.opentelemetry.io/otel/metric"
)

// Metric names; their units and attributes are in docs/observability.md.
const (
	MetricAttempts        = "tenure.attempts"
	MetricRetries         = "tenure.retries"
	MetricRescues         = "tenure.rescues"
	MetricLeasesLost      = "tenure.leases.lost"
	MetricFailures        = "tenure.failures"
	MetricRunsStarted     = "tenure.runs.started"
	MetricRunsCompleted   = "tenure.runs.completed"
	MetricRunsInFlight    = "tenure.runs.in_flight"
	MetricAttemptDuration = "tenure.attempt.duration"
	MetricQueueLag        = "tenure.run.queue_lag"
	MetricRunDuration     = "tenure.run.duration"
	MetricDatabaseErrors  = "tenure.database.errors"
	// MetricReplicationAsynchronous is 1 while a worker's database server
	// has standbys it does not wait for at commit (a failover can lose
	// acknowledged runs), else 0; attribute tenure.replication.mode.
	MetricReplicationAsynchronous = "tenure.database.replication.asynchronous"
	// MetricFlowAdmitted counts attempts admitted under a downstream's
	// limits, and MetricFlowDenied the attempts its limits denied (each a
	// wait, not an attempt), by tenure.flow.cause; attribute
	// tenure.downstream.
	MetricFlowAdmitted = "tenure.flow.admitted"
	MetricFlowDenied   = "tenure.flow.denied"
	// MetricFlowWaiting, MetricFlowInUse and MetricFlowBreaker are a
	// downstream's steps waiting on its limits, its concurrency slots held
	// and its breaker (0 closed, 1 half open, 2 open), as each worker that
	// has run a step calling it reads them about once a second: values of
	// the whole database, the same from every worker.
	MetricFlowWaiting = "tenure.flow.waiting"
	MetricFlowInUse   = "tenure.flow.in_use"
	MetricFlowBreaker = "tenure.flow.breaker"
	// MetricScheduleTicks counts the ticks of schedules a worker decided,
	// by tenure.schedule.decision; MetricScheduleLag is how late each was
	// decided after its nominal time (the fire lag). Attribute
	// tenure.schedule.
	MetricScheduleTicks = "tenure.schedule.ticks"
	MetricScheduleLag   = "tenure.schedule.lag"
)

type instruments struct {
	attempts, retries, rescues, leasesLost, failures, runsStarted, runsCompleted, dbErrors metric.Int64Counter
	inFlight                                                                               metric.Int64UpDownCounter
	replicationAsync                                                                       metric.Int64Gauge
	attemptDuration, queueLag, runDuration                                                 metric.Float64Histogram

	flowAdmitted, flowDenied            metric.Int64Counter
	flowWaiting, flowInUse, flowBreaker metric.Int64Gauge

	scheduleTicks metric.Int64Counter
	scheduleLag   metric.Float64Histogram
}

func newInstruments(m metric.Meter) (instruments, error) {
	var i instruments
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return h
	}
	i.attempts = counter(MetricAttempts, "{attempt}", "Attempts that ended, by outcome.")
	i.retries = counter(MetricRetries, "{retry}", "Attempts that ended in an error and were followed by a scheduled retry.")
	i.rescues = counter(MetricRescues, "{attempt}", "Attempts started to rescue a step whose previous attempt was lost.")
	i.leasesLost = counter(MetricLeasesLost, "{lease}", "Runs a worker abandoned because its lease moved on.")
	i.failures = counter(MetricFailures, "{run}", "Runs that failed, by reason.")
	i.runsStarted = counter(MetricRunsStarted, "{run}", "Runs started (a Start that found an existing key is not counted).")
	i.runsCompleted = counter(MetricRunsCompleted, "{run}", "Runs completed.")
	i.dbErrors = counter(MetricDatabaseErrors, "{error}", "Database errors of a worker's claims, lease renewals and runs' writes, each retried.")
	i.flowAdmitted = counter(MetricFlowAdmitted, "{attempt}", "Attempts admitted under a downstream's limits.")
	i.flowDenied = counter(MetricFlowDenied, "{attempt}", "Attempts a downstream's limit denied, by cause: each run waited, charged nothing.")
	gauge := func(name, unit, desc string) metric.Int64Gauge {
		g, err := m.Int64Gauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	i.flowWaiting = gauge(MetricFlowWaiting, "{step}", "Steps waiting on a downstream's limits now, in the whole database.")
	i.flowInUse = gauge(MetricFlowInUse, "{slot}", "Concurrency slots of a downstream held by live leases now, in the whole database.")
	i.flowBreaker = gauge(MetricFlowBreaker, "1", "A downstream's circuit breaker: 0 closed, 1 half open, 2 open.")
	var err error
	i.inFlight, err = m.Int64UpDownCounter(MetricRunsInFlight, metric.WithUnit("{run}"),
		metric.WithDescription("Runs whose lease a worker holds now."))
	errs = append(errs, err)
	i.replicationAsync, err = m.Int64Gauge(MetricReplicationAsynchronous, metric.WithUnit("1"),
		metric.WithDescription("1 while the worker's database server has standbys it does not wait for at commit, else 0."))
	errs = append(errs, err)
	i.attemptDuration = histogram(MetricAttemptDuration, "How long attempts ran, by outcome.")
	i.queueLag = histogram(MetricQueueLag, "How long a run was due (or its lease expired) before a worker claimed it.")
	i.runDuration = histogram(MetricRunDuration, "Age of runs when they completed or failed.")
	i.scheduleTicks = counter(MetricScheduleTicks, "{tick}", "Ticks of schedules decided, by decision.")
	i.scheduleLag = histogram(MetricScheduleLag, "How late a schedule's tick was decided after its nominal time.")
	return i, errors.Join(errs...)
}
