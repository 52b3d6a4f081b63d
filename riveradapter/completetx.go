package riveradapter

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tenurehq/tenure/policy"
)

// attemptKeyCtx is the key of an attempt's state in the job's context.
type attemptKeyCtx struct{}

// attemptState is what CompleteTx needs of the attempt the middleware is
// running.
type attemptState struct {
	r         *Retry
	job       *rivertype.JobRow
	p         policy.Retry
	hasPolicy bool
	fresh     bool
	b         beginRes
	inTx      bool // CompleteTx wrote the end in the job's transaction
}

// CompleteTx completes job in tx, as river.JobCompleteTx does, and, in a
// client with Record, writes its attempt's end (succeeded) in tx too: the
// job's completion and its record in Tenure commit or roll back together.
// Use it where a worker would call river.JobCompleteTx (a pgx transaction,
// River's riverpgxv5 driver). When Work then returns nil, the attempt is
// not written again; when it returns an error (tx rolled back), the
// middleware records the failure as for any attempt.
func CompleteTx[TArgs river.JobArgs](ctx context.Context, tx pgx.Tx, job *river.Job[TArgs]) (*river.Job[TArgs], error) {
	st, _ := ctx.Value(attemptKeyCtx{}).(*attemptState)
	if st != nil && st.r.rec != nil && st.job.ID == job.ID {
		rec := st.r.rec
		end := endReq{status: "succeeded"}
		if st.fresh {
			req, err := rec.request(ctx, st.job, st.p, st.hasPolicy)
			if err != nil {
				return nil, err
			}
			ids, err := rec.firstIn(ctx, tx, true, []firstReq{{begin: req, started: attemptedAt(st.job), end: end}})
			if err != nil {
				return nil, err
			}
			if ids[0] == nil { // a run already: River rescued this attempt and the next began
				if err := rec.late(ctx, tx, true, st.job, end); err != nil {
					return nil, err
				}
			}
		} else {
			end.run, end.attempt = st.b.run, st.b.attempt
			if _, err := rec.endIn(ctx, tx, true, []endReq{end}); err != nil {
				return nil, err
			}
		}
	}
	done, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
	if err == nil && st != nil {
		st.inTx = true
	}
	return done, err
}
