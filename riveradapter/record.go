package riveradapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/policy"
)

// statementTimeout bounds one statement of the recorder or the reconciler.
const statementTimeout = 30 * time.Second

// defaultLease is the shadow run's lease when River's RescueStuckJobsAfter
// is not set: River's own default.
const defaultLease = time.Hour

// Record makes the Retry write every attempt of every River job it works
// to Tenure's tables in schema (migrated by Tenure, version 26 or later) on
// pool, which may be River's own: each job is a shadow run of workflow
// "river:<kind>" (queue "river", run_key "river:<job id>"), its attempts
// the rows of its one step, so that Tenure's failure table, requeue, CLI
// and UI show River jobs beside Tenure runs. It also gives the kinds with a
// policy their rescue budget (policy.MaxRescues) apart from MaxAttempts;
// see the package documentation.
func Record(pool *pgxpool.Pool, schema string) Option {
	return func(r *Retry) error {
		if pool == nil {
			return errors.New("riveradapter: Record: nil pool")
		}
		if schema == "" {
			return errors.New("riveradapter: Record: empty schema (Tenure's, as given to tenure migrate)")
		}
		rec := &recorder{pool: pool, schema: pgx.Identifier{schema}.Sanitize(), lease: defaultLease, policies: map[string][]byte{}}
		rec.begins.run = rec.beginBatch
		rec.ends.run = rec.endBatch
		rec.firsts.run = rec.firstBatch
		r.rec = rec
		return nil
	}
}

// recorder writes River jobs' attempts to Tenure's tables, in batches.
type recorder struct {
	pool     *pgxpool.Pool
	schema   string // Tenure's, quoted
	river    string // River's, quoted, with its dot; "" for the search path
	lease    time.Duration
	logger   *slog.Logger      // River's, from Configure
	policies map[string][]byte // kind -> policy JSON, set before the client starts

	mu        sync.Mutex
	adoptedTo time.Time // the database's time of the last reconciler pass's start

	begins batch[beginReq, beginRes]
	ends   batch[endReq, bool]
	firsts batch[firstReq, *uuid.UUID]
}

// firstReq is a job's first attempt, ended: river_first's row.
type firstReq struct {
	begin   beginReq
	started time.Time
	end     endReq
}

type beginReq struct {
	job        int64
	id         uuid.UUID
	kind       string
	args       string
	policy     *string
	maxRescues *int32
	trace      *string
	span       *string
	history    *string // River's errors of the job, JSON
	worker     string
}

type beginRes struct {
	run     uuid.UUID
	attempt int
	errors  int
	rescues int
	verdict string // "run" or "rescues_exhausted"
}

type endReq struct {
	run     uuid.UUID
	attempt int
	status  string
	msg     *string
	typ     *string
	stack   *string
	delayMS *int64
	source  *string
	reason  *string
}

// request is job's row of river_begin or river_first.
func (rec *recorder) request(ctx context.Context, job *rivertype.JobRow, p policy.Retry, hasPolicy bool) (beginReq, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return beginReq{}, err
	}
	req := beginReq{job: job.ID, id: id, kind: job.Kind, args: string(job.EncodedArgs), worker: "river"}
	if len(job.EncodedArgs) == 0 {
		req.args = "null"
	}
	if n := len(job.AttemptedBy); n > 0 {
		req.worker = job.AttemptedBy[n-1]
	}
	if hasPolicy {
		if js, ok := rec.policies[job.Kind]; ok {
			s := string(js)
			req.policy = &s
		}
		m := int32(p.MaxRescues)
		if p.AtMostOnce {
			m = 0
		}
		req.maxRescues = &m
	}
	if sc := oteltrace.SpanContextFromContext(ctx); sc.IsValid() {
		t, s := sc.TraceID().String(), sc.SpanID().String()
		req.trace, req.span = &t, &s
	}
	if len(job.Errors) > 0 {
		if js, err := json.Marshal(job.Errors); err == nil {
			s := string(js)
			req.history = &s
		}
	}
	return req, nil
}

// begin records the start of job's attempt: one row of river_begin.
func (rec *recorder) begin(ctx context.Context, job *rivertype.JobRow, p policy.Retry, hasPolicy bool) (beginRes, error) {
	req, err := rec.request(ctx, job, p, hasPolicy)
	if err != nil {
		return beginRes{}, err
	}
	return rec.begins.do(ctx, req)
}

// first records job's first attempt, ended as e says, with its run: one
// row of river_first. It returns false when the job had a run already
// (nothing was written: record it with begin and end).
func (rec *recorder) first(ctx context.Context, job *rivertype.JobRow, p policy.Retry, hasPolicy bool, e endReq) (bool, error) {
	req, err := rec.request(ctx, job, p, hasPolicy)
	if err != nil {
		return false, err
	}
	id, err := rec.firsts.do(ctx, firstReq{begin: req, started: attemptedAt(job), end: e})
	return id != nil, err
}

// querier is a pool or a transaction.
type querier interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// query runs sql with args on q, scanning each row into dest and calling
// each, after Tenure's CALL planner in the same batch: one round trip and
// one transaction, so that no statement of the adapter's, nor any inside
// its functions, is ever JIT-compiled, whatever the server's settings (see
// Tenure's migration 9; River's own statements are River's). In a caller's
// transaction (inTx: CompleteTx's) the caller's jit setting is given back
// after it.
func (rec *recorder) query(ctx context.Context, q querier, inTx bool, sql string, args []any, dest []any, each func() error) error {
	b := &pgx.Batch{}
	if inTx {
		b.Queue(`CALL ` + rec.schema + `.planner('enter')`)
	} else {
		b.Queue(`CALL ` + rec.schema + `.planner('hot')`)
	}
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, dest, each)
		return err
	})
	if inTx {
		b.Queue(`CALL ` + rec.schema + `.planner('leave')`)
	}
	return q.SendBatch(ctx, b).Close()
}

func (rec *recorder) firstBatch(ctx context.Context, reqs []firstReq) ([]*uuid.UUID, error) {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	return rec.firstIn(ctx, rec.pool, false, reqs)
}

// firstIn runs river_first for reqs on q.
func (rec *recorder) firstIn(ctx context.Context, q querier, inTx bool, reqs []firstReq) ([]*uuid.UUID, error) {
	n := len(reqs)
	jobs, ids, kinds, args, started := make([]int64, n), make([]uuid.UUID, n), make([]string, n), make([]string, n), make([]time.Time, n)
	pols, traces, spans, sts := make([]*string, n), make([]*string, n), make([]*string, n), make([]string, n)
	msgs, typs, stacks, srcs, reasons := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	delays, workers := make([]*int64, n), make([]string, n)
	for i, q := range reqs {
		b, e := q.begin, q.end
		jobs[i], ids[i], kinds[i], args[i], started[i], workers[i] = b.job, b.id, b.kind, b.args, q.started, b.worker
		pols[i], traces[i], spans[i], sts[i] = b.policy, b.trace, b.span, e.status
		msgs[i], typs[i], stacks[i], srcs[i], reasons[i], delays[i] = e.msg, e.typ, e.stack, e.source, e.reason, e.delayMS
	}
	out := make([]*uuid.UUID, n)
	var ord int
	var id *uuid.UUID
	if err := rec.query(ctx, q, inTx, `SELECT ord, run_id FROM `+rec.schema+
		`.river_first($1, $2, $3, $4::jsonb[], $5::jsonb[], $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`,
		[]any{jobs, ids, kinds, args, pols, started, sts, msgs, typs, stacks, delays, srcs, reasons, traces, spans, workers, rec.lease},
		[]any{&ord, &id}, func() error {
			if ord < 1 || ord > n {
				return fmt.Errorf("riveradapter: river_first returned row %d of %d", ord, n)
			}
			out[ord-1] = id
			return nil
		}); err != nil {
		return nil, err
	}
	return out, nil
}

func (rec *recorder) beginBatch(ctx context.Context, reqs []beginReq) ([]beginRes, error) {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	return rec.beginIn(ctx, rec.pool, false, reqs)
}

// beginIn runs river_begin for reqs on q.
func (rec *recorder) beginIn(ctx context.Context, q querier, inTx bool, reqs []beginReq) ([]beginRes, error) {
	n := len(reqs)
	jobs, ids, kinds, args := make([]int64, n), make([]uuid.UUID, n), make([]string, n), make([]string, n)
	pols, maxR, traces, spans, hists := make([]*string, n), make([]*int32, n), make([]*string, n), make([]*string, n), make([]*string, n)
	workers := make([]string, n)
	for i, q := range reqs {
		jobs[i], ids[i], kinds[i], args[i], workers[i] = q.job, q.id, q.kind, q.args, q.worker
		pols[i], maxR[i], traces[i], spans[i], hists[i] = q.policy, q.maxRescues, q.trace, q.span, q.history
	}
	out := make([]beginRes, n)
	seen := 0
	var ord int
	var r beginRes
	if err := rec.query(ctx, q, inTx, `SELECT ord, run_id, coalesce(attempt, 0), errors, rescues, verdict FROM `+rec.schema+
		`.river_begin($1, $2, $3, $4::jsonb[], $5::jsonb[], $6, $7, $8, $9::jsonb[], $10, $11)`,
		[]any{jobs, ids, kinds, args, pols, maxR, traces, spans, hists, workers, rec.lease},
		[]any{&ord, &r.run, &r.attempt, &r.errors, &r.rescues, &r.verdict}, func() error {
			if ord < 1 || ord > n {
				return fmt.Errorf("riveradapter: river_begin returned row %d of %d", ord, n)
			}
			out[ord-1] = r
			seen++
			return nil
		}); err != nil {
		return nil, err
	}
	if seen != n {
		return nil, fmt.Errorf("riveradapter: river_begin returned %d rows for %d jobs", seen, n)
	}
	return out, nil
}

// late records job's first attempt, ended as e says, when the job had a
// run already (river_late), on q.
func (rec *recorder) late(ctx context.Context, q querier, inTx bool, job *rivertype.JobRow, e endReq) error {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	worker := "river"
	if n := len(job.AttemptedBy); n > 0 {
		worker = job.AttemptedBy[n-1]
	}
	var trace, span *string
	if sc := oteltrace.SpanContextFromContext(ctx); sc.IsValid() {
		t, s := sc.TraceID().String(), sc.SpanID().String()
		trace, span = &t, &s
	}
	return rec.query(ctx, q, inTx, `SELECT FROM `+rec.schema+`.river_late($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		[]any{job.ID, job.Kind, attemptedAt(job), e.status, e.msg, e.typ, e.stack, e.delayMS, e.source, e.reason, trace, span, worker},
		nil, func() error { return nil })
}

// end records the end of an attempt begun with begin; it reports false
// when the attempt had been closed as lost meanwhile.
func (rec *recorder) end(ctx context.Context, e endReq) (bool, error) {
	return rec.ends.do(ctx, e)
}

func (rec *recorder) endBatch(ctx context.Context, reqs []endReq) ([]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	return rec.endIn(ctx, rec.pool, false, reqs)
}

// endIn runs river_end for reqs on q.
func (rec *recorder) endIn(ctx context.Context, q querier, inTx bool, reqs []endReq) ([]bool, error) {
	n := len(reqs)
	runs, atts, sts := make([]uuid.UUID, n), make([]int32, n), make([]string, n)
	msgs, typs, stacks, srcs, reasons := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	delays := make([]*int64, n)
	for i, q := range reqs {
		runs[i], atts[i], sts[i] = q.run, int32(q.attempt), q.status
		msgs[i], typs[i], stacks[i], srcs[i], reasons[i], delays[i] = q.msg, q.typ, q.stack, q.source, q.reason, q.delayMS
	}
	out := make([]bool, n)
	var ord int
	var ok bool
	if err := rec.query(ctx, q, inTx, `SELECT ord, recorded FROM `+rec.schema+
		`.river_end($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		[]any{runs, atts, sts, msgs, typs, stacks, delays, srcs, reasons, rec.lease},
		[]any{&ord, &ok}, func() error {
			if ord < 1 || ord > n {
				return fmt.Errorf("riveradapter: river_end returned row %d of %d", ord, n)
			}
			out[ord-1] = ok
			return nil
		}); err != nil {
		return nil, err
	}
	return out, nil
}

// policyJSON is p as Tenure records it on a step.
func policyJSON(p policy.Retry) []byte {
	js, err := json.Marshal(p)
	if err != nil {
		return []byte(`{}`)
	}
	return js
}

// text returns a pointer to s, nil for "".
func text(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// attemptedAt is when River began job's attempt, by the database's clock.
func attemptedAt(job *rivertype.JobRow) time.Time {
	if job.AttemptedAt != nil {
		return *job.AttemptedAt
	}
	return time.Now()
}
