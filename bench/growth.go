package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/ui"
)

// H is issue 25's "costs flat as history grows": for each size of history
// (-h-attempts, by default 10^5, 10^6 and 10^7 attempts), a schema is filled
// with the history of history.go (1.5 attempts a run: 92 runs in 100 of one
// attempt, 5 of ten steps, 2 failed after three, 1 at its second), vacuumed
// and analysed, at the server's settings (JIT included); then:
//
//   - A runs on it (100 callers, an in-process worker): runs/s and p50 from
//     start to result, the end-to-end figure of a claim and its commits;
//   - each hot operation is timed alone, hOps times, through the store the
//     worker uses: a claim of 10 runs, the commit that records their
//     attempts' starts, the commit that ends them, a heartbeat renewing 100
//     held leases, and what a person reads: the UI's run page, its runs
//     list and its failures page (server time), and `tenure runs show`'s
//     reads (the run's steps, attempts and audit rows). The run read is a
//     failed run in the middle of the history.
//
// The target is that each operation's median stays within 1.2× across the
// sizes (its largest median over its smallest). The sizes' bytes per run,
// step and attempt are reported too (docs/operations.md's sizing).

// hOps is how many times each operation is timed per size.
const hOps = 200

// hSizes are the sizes of history H measures by default, in attempts.
var hSizes = []int{100_000, 1_000_000, 10_000_000}

// attemptsPerRun is history.go's mix: (92 + 5×10 + 2×3 + 2) / 100.
const attemptsPerRun = 1.5

// growthOp is one timed operation of H.
type growthOp struct {
	name string
	// target: the operation is held to the 1.2× target (the failures page,
	// which lists every open failure, grows with them by design).
	target bool
}

var growthOps = []growthOp{
	{"claim of 10 runs", true},
	{"commit: 10 attempts' starts", true},
	{"commit: 10 steps' and runs' ends", true},
	{"heartbeat: 100 leases", true},
	{"UI: a run's page", true},
	{"UI: runs list", true},
	{"runs show (steps, attempts, audit)", true},
	{"UI: failures page (every open failure, grouped)", false},
}

// hRounds is how many rounds H alternates its sizes in: each round runs A
// and times every operation hOps/hRounds times on each size in turn, so
// that a machine that drifts (a shared one) weighs on every size alike.
const hRounds = 4

// tenureGrowth is H: every size filled first, each in a schema of its own,
// then rounds that time A and the operations on each size in turn.
func tenureGrowth(ctx context.Context, c config, m *meter) (_ []result, err error) {
	sizes := c.hAttempts
	if len(sizes) == 0 {
		sizes = hSizes
	}
	envs := make([]*tenureEnv, 0, len(sizes))
	defer func() {
		for _, e := range envs {
			if derr := dropSchema(ctx, e.pool, e.schema); err == nil {
				err = derr
			}
			e.close()
		}
	}()
	var sizing []string
	for _, size := range sizes {
		cs := c
		cs.history = max(1, int(float64(size)/attemptsPerRun+0.5))
		cs.prefix = fmt.Sprintf("%s_h%d", c.prefix, size)
		fmt.Fprintf(c.log, "bench: H: a history of %d runs (%d attempts)\n", cs.history, size)
		e, err := newTenureEnv(ctx, cs)
		if err != nil {
			return nil, err
		}
		envs = append(envs, e)
		line, err := growthSizing(ctx, e) // the history alone
		if err != nil {
			return nil, err
		}
		sizing = append(sizing, fmt.Sprintf("%.0e attempts: %s", float64(size), line))
	}
	rows := make([]result, len(sizes))
	for i, size := range sizes {
		rows[i] = result{Workload: "H", Variant: fmt.Sprintf("%.0e", float64(size)), System: "tenure", Runs: c.runsA / hRounds, Steps: 1,
			History: max(1, int(float64(size)/attemptsPerRun+0.5))}
	}
	times := make([][][]time.Duration, len(sizes)) // [size][op]
	rate := make([][]float64, len(sizes))          // [size] A's runs/s in each round
	for round := range hRounds {
		fmt.Fprintf(c.log, "bench: H: round %d of %d\n", round+1, hRounds)
		for i, e := range envs {
			row, err := growthRound(ctx, c, m, e, rows[i])
			if err != nil {
				return nil, err
			}
			rate[i] = append(rate[i], row.RunsPerSec)
			if round == 0 {
				rows[i] = row
			}
			if times[i] == nil {
				times[i] = make([][]time.Duration, len(growthOps))
			}
			if err := growthTimes(ctx, e, hOps/hRounds, times[i]); err != nil {
				return nil, err
			}
		}
	}
	var checks []check
	for k, op := range growthOps {
		med := make([]float64, len(sizes))
		figs := make([]string, len(sizes))
		for i := range sizes {
			ts := slices.Clone(times[i][k])
			slices.Sort(ts)
			med[i] = float64(ts[len(ts)/2].Microseconds()) / 1000
			figs[i] = fmt.Sprintf("%.2f", med[i])
		}
		lo, hi := slices.Min(med), slices.Max(med)
		ch := check{Name: op.name + ", p50 ms at each size", Figure: fmt.Sprintf("%s: %.2f× (largest ÷ smallest)", strings.Join(figs, ", "), hi/lo),
			Target: "≤ 1.2×", Pass: hi/lo <= 1.2}
		if !op.target {
			ch.Target, ch.Pass = "none: it grows with the open failures", true
		}
		checks = append(checks, ch)
	}
	figs := make([]string, len(sizes))
	var mean []float64
	for i := range sizes {
		var sum float64
		for _, r := range rate[i] {
			sum += r
		}
		mean = append(mean, sum/float64(len(rate[i])))
		figs[i] = fmt.Sprintf("%.0f", mean[i])
	}
	checks = append(checks, check{Name: "A's runs/s at each size (mean of the rounds)", Figure: fmt.Sprintf("%s: %.2f× (largest ÷ smallest)",
		strings.Join(figs, ", "), slices.Max(mean)/slices.Min(mean)), Target: "none: end to end, on a shared machine", Pass: true})
	for _, s := range sizing {
		checks = append(checks, check{Name: "sizing", Figure: s, Target: "none: docs/operations.md", Pass: true})
	}
	rows[len(rows)-1].Checks = checks
	return rows, nil
}

// growthRound is A on e's history.
func growthRound(ctx context.Context, c config, m *meter, e *tenureEnv, res result) (result, error) {
	w, err := e.worker(c, c.tenureConcurrency)
	if err != nil {
		return res, err
	}
	if err := w.Start(ctx); err != nil {
		return res, err
	}
	err = m.measure(ctx, &res, func() ([]time.Duration, error) {
		return callers(ctx, res.Runs, c.callers, func(ctx context.Context, _ int) error {
			r, err := sdk.Start(ctx, e.client, benchWF, benchIn{Steps: 1})
			if err != nil {
				return err
			}
			_, err = r.Result(ctx)
			return err
		})
	})
	if serr := stopWorker(w); err == nil {
		err = serr
	}
	if err != nil {
		return res, err
	}
	res.Completed, err = e.completed(ctx, e.pool)
	return res, err
}

// growthTimes times each of growthOps n times on e's schema (the failures
// page once for every 20), appending to times[op].
func growthTimes(ctx context.Context, e *tenureEnv, n int, times [][]time.Duration) error {
	st, err := store.New(e.pool, store.WithSchema(e.schema))
	if err != nil {
		return err
	}
	op, err := operator.New(e.pool, operator.WithSchema(e.schema))
	if err != nil {
		return err
	}
	h, err := ui.New(ui.Config{Operator: op})
	if err != nil {
		return err
	}
	q := pgx.Identifier{e.schema}.Sanitize()
	// The run read: a failed run of the history, in the middle of it.
	var shown uuid.UUID
	if err := e.pool.QueryRow(ctx, `SELECT run_id FROM `+q+`.failures ORDER BY run_id
		OFFSET (SELECT count(*) / 2 FROM `+q+`.failures) LIMIT 1`).Scan(&shown); err != nil {
		return fmt.Errorf("a failed run of the history: %w", err)
	}
	pol, err := json.Marshal(policy.Default())
	if err != nil {
		return err
	}
	// 100 held leases for the heartbeat, of a workflow no worker serves.
	held, err := growthClaim(ctx, e, st, 100)
	if err != nil {
		return err
	}
	leases := make([]store.Lease, len(held))
	for i, r := range held {
		leases[i] = store.Lease{RunID: r.ID, Epoch: r.Epoch}
	}
	beat := &store.WorkerBeat{ID: uuid.New(), Label: "bench-h", Host: "bench", PID: 1, Version: "bench",
		Workflows: []string{"bench-h"}, Queues: []string{"default"}, Concurrency: 200, Held: len(leases),
		Interval: time.Second, TTL: time.Hour}

	timed := func(i int, fn func() error) error {
		start := time.Now()
		err := fn()
		times[i] = append(times[i], time.Since(start))
		if err != nil {
			return fmt.Errorf("%s: %w", growthOps[i].name, err)
		}
		return nil
	}
	page := func(path string) func() error {
		return func() error {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
			if rec.Code != http.StatusOK {
				return fmt.Errorf("GET %s: %d %.200s", path, rec.Code, rec.Body.String())
			}
			return nil
		}
	}
	for range n {
		if _, err := e.pool.Exec(ctx, `INSERT INTO `+q+`.runs (id, workflow, input) SELECT `+q+`._uuid_v7(), 'bench-h', '{}'
			FROM generate_series(1, 10)`); err != nil {
			return err
		}
		var claimed []store.Claimed
		if err := timed(0, func() (err error) {
			claimed, err = st.Claim(ctx, []string{"bench-h"}, []string{"default"}, 10, "bench-h", time.Hour)
			if err == nil && len(claimed) != 10 {
				err = fmt.Errorf("claimed %d of 10", len(claimed))
			}
			return err
		}); err != nil {
			return err
		}
		starts, ends := make([]store.Write, len(claimed)), make([]store.Write, len(claimed))
		for j, r := range claimed {
			l := store.Lease{RunID: r.ID, Epoch: r.Epoch}
			starts[j] = store.Write{Lease: l, StartAttempt: &store.AttemptStart{Step: 1, Attempt: 1, Activity: "noop", Policy: pol, Worker: "bench-h"}}
			ends[j] = store.Write{Lease: l, StepDone: &store.StepDone{Step: 1, Attempt: 1, Output: []byte(`1`)},
				CompleteRun: &store.RunOutput{Output: []byte(`1`)}}
		}
		for k, ws := range [][]store.Write{starts, ends} {
			if err := timed(1+k, func() error {
				out, err := st.Commit(ctx, e.pool, ws)
				for _, r := range out {
					if err == nil && r.Err != nil {
						err = r.Err
					}
				}
				return err
			}); err != nil {
				return err
			}
		}
		if err := timed(3, func() error {
			got, err := st.Renew(ctx, e.pool, leases, time.Hour, beat)
			if err == nil && len(got) != len(leases) {
				err = fmt.Errorf("renewed %d of %d", len(got), len(leases))
			}
			return err
		}); err != nil {
			return err
		}
		for k, path := range []string{"/runs/" + shown.String(), "/runs"} {
			if err := timed(4+k, page(path)); err != nil {
				return err
			}
		}
		if err := timed(6, func() error {
			if _, err := op.Steps(ctx, shown); err != nil {
				return err
			}
			if _, err := op.History(ctx, shown); err != nil {
				return err
			}
			_, err := op.RunAuditLog(ctx, shown)
			return err
		}); err != nil {
			return err
		}
	}
	// The failures page is slow by design on a big history (it groups
	// every open failure): timed once for every 20 of the others.
	for range max(1, n/20) {
		if err := timed(7, page("/failures")); err != nil {
			return err
		}
	}
	return nil
}

// growthClaim starts and claims n runs of a workflow no worker serves.
func growthClaim(ctx context.Context, e *tenureEnv, st *store.Store, n int) ([]store.Claimed, error) {
	q := pgx.Identifier{e.schema}.Sanitize()
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+q+`.runs (id, workflow, queue, input) SELECT `+q+`._uuid_v7(), 'bench-held', 'held', '{}'
		FROM generate_series(1, $1::int)`, n); err != nil {
		return nil, err
	}
	got, err := st.Claim(ctx, []string{"bench-held"}, []string{"held"}, n, "bench-h", time.Hour)
	if err == nil && len(got) != n {
		err = fmt.Errorf("claimed %d of %d held runs", len(got), n)
	}
	return got, err
}

// growthSizing is the bytes per run, step and attempt of e's tables (heap,
// indexes and TOAST, of every partition), as filled.
func growthSizing(ctx context.Context, e *tenureEnv) (string, error) {
	var parts []string
	for _, t := range []string{"runs", "steps", "attempts", "failures"} {
		var rows, bytes int64
		name := pgx.Identifier{e.schema, t}.Sanitize()
		if err := e.pool.QueryRow(ctx, `SELECT count(*), coalesce((SELECT sum(pg_total_relation_size(relid))::bigint FROM pg_partition_tree($1::regclass)),
			pg_total_relation_size($1::regclass)) FROM `+name, name).Scan(&rows, &bytes); err != nil {
			return "", err
		}
		if rows > 0 {
			parts = append(parts, fmt.Sprintf("%s %d rows, %.0f B a row", t, rows, float64(bytes)/float64(rows)))
		}
	}
	return strings.Join(parts, "; "), nil
}
