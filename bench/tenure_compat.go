package main

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/sdk"
)

// The two Tenure calls that are not on this branch yet live here, so that
// switching to them is one edit.
//
// TODO(lead): switch to sdk.StartMany / Client.Close once merged:
//
//	func startMany(...) { params := make([]sdk.StartParams[benchIn], len(ins)); ...; return sdk.StartMany(ctx, c, wf, params) }
//	func closeClient(c *sdk.Client) { c.Close() }

// startMany starts one run of wf per input. Until sdk.StartMany exists it
// calls sdk.StartTx for each input inside one transaction: one commit, like
// StartMany, but one round trip per run. It is never timed.
func startMany(ctx context.Context, c *sdk.Client, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, wf *sdk.Workflow[benchIn, int], ins []benchIn) ([]*sdk.Run[int], error) {
	runs := make([]*sdk.Run[int], 0, len(ins))
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, in := range ins {
			r, err := sdk.StartTx(ctx, c, tx, wf, in)
			if err != nil {
				return err
			}
			runs = append(runs, r)
		}
		return nil
	})
	return runs, err
}

// closeClient releases what the client holds; the client has no Close yet.
func closeClient(*sdk.Client) {}
