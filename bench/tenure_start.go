package main

import (
	"context"

	"github.com/tenurehq/tenure/sdk"
)

// startMany starts one run of wf per input with sdk.StartMany: one statement
// and one commit for them all.
func startMany(ctx context.Context, c *sdk.Client, wf *sdk.Workflow[benchIn, int], ins []benchIn) ([]*sdk.Run[int], error) {
	params := make([]sdk.StartParams[benchIn], len(ins))
	for i, in := range ins {
		params[i] = sdk.StartParams[benchIn]{Input: in}
	}
	return sdk.StartMany(ctx, c, wf, params)
}

// closeClient stops the client's notice listener.
func closeClient(c *sdk.Client) { c.Close() }
