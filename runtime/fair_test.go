package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// tenantJob is one run of a tenant in the fairness scenarios.
type tenantJob struct {
	Tenant string `json:"tenant"`
	N      int    `json:"n"`
}

// fairWorkload is the scenario of issue 22, scaled by its fields: tenant
// "big" enqueues big runs, then smalls other tenants small runs each, all on
// one queue, with fairness keys or without; then one worker of fixed
// concurrency runs them, each one short activity.
type fairWorkload struct {
	big, smalls, small int
	keys               bool
}

// fairOutcome is what a fairWorkload measured, by the database clock from
// the worker's start.
type fairOutcome struct {
	// done[t] is when tenant t's last run finished.
	done map[string]time.Duration
	// throughput is the runs finished per second until the last small
	// tenant's last run finished, all tenants together.
	throughput float64
	// fairShare is when a small tenant would finish with 1/(smalls+1) of
	// that throughput from the start: small * (smalls+1) / throughput.
	fairShare time.Duration
	// bigBefore[t] is how many of big's runs had finished when t's last did.
	bigBefore map[string]int
	// all is when the last run finished; rate the runs finished per second
	// until then.
	all  time.Duration
	rate float64
}

func (w fairWorkload) run(tb testing.TB) fairOutcome {
	e := newEnv(tb)
	act := activities.New("fair-work", func(ctx context.Context, j tenantJob) (int, error) {
		time.Sleep(time.Millisecond)
		return j.N, nil
	}, policy.MaxAttempts(1))
	wf := sdk.NewWorkflow("tenant-job", func(ctx context.Context, j tenantJob) (int, error) {
		return sdk.Execute(ctx, act, j)
	})
	start := func(tenant string, n int) {
		for from := 0; from < n; from += 1000 {
			var params []sdk.StartParams[tenantJob]
			for i := from; i < min(n, from+1000); i++ {
				var opts []sdk.StartOption
				if w.keys {
					opts = append(opts, sdk.WithFairnessKey(tenant))
				}
				params = append(params, sdk.StartParams[tenantJob]{Input: tenantJob{tenant, i}, Options: opts})
			}
			if _, err := sdk.StartMany(e.ctx, e.client, wf, params); err != nil {
				tb.Fatal(err)
			}
		}
	}
	start("big", w.big)
	var smalls []string
	for i := range w.smalls {
		smalls = append(smalls, fmt.Sprintf("small-%02d", i))
		start(smalls[i], w.small)
	}
	cfg := e.config()
	cfg.Concurrency = 8
	t0 := scalar[time.Time](e, `SELECT now()`)
	e.worker(cfg, wf)
	total := w.big + w.smalls*w.small
	deadline := time.Now().Add(10 * time.Minute)
	for fscalar[int](e, `SELECT count(*) FROM {schema}.runs WHERE status = 'completed'`) < total {
		if time.Now().After(deadline) {
			tb.Fatalf("the %d runs did not complete in 10 minutes", total)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := fscalar[int](e, `SELECT count(*) FROM {schema}.runs WHERE status <> 'completed'`); n != 0 {
		tb.Fatalf("%d runs did not complete", n)
	}
	out := fairOutcome{done: map[string]time.Duration{}, bigBefore: map[string]int{}}
	rows, err := e.pool.Query(e.ctx, strings.ReplaceAll(`
		SELECT t.tenant, extract(epoch FROM t.done - $1) * 1000,
		       (SELECT count(*) FROM {schema}.runs b WHERE b.input->>'tenant' = 'big' AND b.finished_at <= t.done)
		FROM (SELECT input->>'tenant' AS tenant, max(finished_at) AS done FROM {schema}.runs GROUP BY 1) AS t`, "{schema}", e.schema), t0)
	if err != nil {
		tb.Fatal(err)
	}
	for rows.Next() {
		var tenant string
		var ms float64
		var before int
		if err := rows.Scan(&tenant, &ms, &before); err != nil {
			tb.Fatal(err)
		}
		out.done[tenant], out.bigBefore[tenant] = time.Duration(ms*float64(time.Millisecond)), before
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	for _, d := range out.done {
		out.all = max(out.all, d)
	}
	out.rate = float64(total) / out.all.Seconds()
	var last time.Duration
	for _, s := range smalls {
		last = max(last, out.done[s])
	}
	finished := fscalar[int](e, `SELECT count(*) FROM {schema}.runs WHERE finished_at <= $1::timestamptz + $2 * interval '1 millisecond'`,
		t0, last.Milliseconds())
	out.throughput = float64(finished) / last.Seconds()
	out.fairShare = time.Duration(float64(w.small*(w.smalls+1)) / out.throughput * float64(time.Second))
	return out
}

// Issue 22's scenario, scaled down: tenant big enqueues 2,000 runs, then
// ten others 80 each. With fairness keys each small tenant finishes within
// 1.2 times its fair share of the throughput (1/11 of it while all eleven
// have runs waiting); without them, the same workload makes them wait for
// big's backlog.
func TestFairness_SmallTenantsGetTheirShareOfABackloggedQueue(t *testing.T) {
	w := fairWorkload{big: 2000, smalls: 10, small: 80}

	w.keys = true
	fair := w.run(t)
	t.Logf("with keys: %.0f runs/s, fair share %v; all done at %v (%.0f runs/s)", fair.throughput, fair.fairShare.Round(time.Millisecond),
		fair.all.Round(time.Millisecond), fair.rate)
	for tenant, done := range fair.done {
		if tenant == "big" {
			continue
		}
		t.Logf("  %s done at %v (%.2f of its fair share), %d of big's runs before", tenant, done.Round(time.Millisecond),
			done.Seconds()/fair.fairShare.Seconds(), fair.bigBefore[tenant])
		if done > fair.fairShare*12/10 {
			t.Errorf("%s done at %v, over 1.2 times its fair share %v", tenant, done, fair.fairShare)
		}
		// The same from big's side: while the small tenants had runs
		// waiting, big got about as many runs done as each of them.
		if fair.bigBefore[tenant] > w.small*12/10 {
			t.Errorf("when %s was done (%d runs), big had %d done: over 1.2 times a share", tenant, w.small, fair.bigBefore[tenant])
		}
	}

	w.keys = false
	unfair := w.run(t)
	t.Logf("without keys: all done at %v (%.0f runs/s)", unfair.all.Round(time.Millisecond), unfair.rate)
	for tenant, done := range unfair.done {
		if tenant == "big" {
			continue
		}
		t.Logf("  %s done at %v, %d of big's runs before", tenant, done.Round(time.Millisecond), unfair.bigBefore[tenant])
		// Started after big's, they wait behind its whole backlog.
		if unfair.bigBefore[tenant] < w.big*95/100 {
			t.Errorf("without keys %s was done when %d of big's %d runs were: it did not wait for them", tenant, unfair.bigBefore[tenant], w.big)
		}
	}
}

// A key of weight 3 gets three times the throughput of one of weight 1
// while both have runs waiting.
func TestFairness_WeightsShareThroughput(t *testing.T) {
	e := newEnv(t)
	act := activities.New("fair-work", func(ctx context.Context, j tenantJob) (int, error) {
		time.Sleep(time.Millisecond)
		return j.N, nil
	}, policy.MaxAttempts(1))
	wf := sdk.NewWorkflow("tenant-job", func(ctx context.Context, j tenantJob) (int, error) {
		return sdk.Execute(ctx, act, j)
	})
	const each = 400
	for _, k := range []struct {
		tenant string
		weight int
	}{{"a", 1}, {"b", 3}} {
		var params []sdk.StartParams[tenantJob]
		for i := range each {
			params = append(params, sdk.StartParams[tenantJob]{Input: tenantJob{k.tenant, i},
				Options: []sdk.StartOption{sdk.WithFairness(k.tenant, k.weight)}})
		}
		if _, err := sdk.StartMany(e.ctx, e.client, wf, params); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config()
	cfg.Concurrency = 8
	e.worker(cfg, wf)
	// Until b's backlog is gone: its 400 runs and a third as many of a's.
	const first = each + each/3
	eventually(t, "b's runs completed", func() bool {
		return fscalar[int](e, `SELECT count(*) FROM {schema}.runs WHERE status = 'completed' AND input->>'tenant' = 'b'`) == each
	})
	var a, b int
	if err := e.pool.QueryRow(e.ctx, strings.ReplaceAll(`
		SELECT count(*) FILTER (WHERE tenant = 'a'), count(*) FILTER (WHERE tenant = 'b')
		FROM (SELECT input->>'tenant' AS tenant FROM {schema}.runs WHERE started_at IS NOT NULL
		      ORDER BY started_at, fair_vt LIMIT $1) AS x`, "{schema}", e.schema), first).Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	t.Logf("of the first %d runs started: a %d, b %d", first, a, b)
	if ratio := float64(b) / float64(a); ratio < 2.7 || ratio > 3.3 {
		t.Errorf("of the first %d runs started, a had %d and b %d: b/a = %.2f, want about 3", first, a, b, ratio)
	}
}

// BenchmarkFairness is issue 22's scenario at full scale: tenant big
// enqueues 20,000 runs, then ten others 200 each, with fairness keys and
// without. It reports when the last small tenant finishes against its fair
// share of the measured throughput (1/11 while all eleven have runs
// waiting), and how many of big's runs were done by then. Run it alone,
// once:
//
//	go test ./runtime -run '^$' -bench Fairness -benchtime 1x
func BenchmarkFairness(b *testing.B) {
	for _, keys := range []bool{true, false} {
		b.Run(fmt.Sprintf("keys=%t", keys), func(b *testing.B) {
			for range b.N {
				out := fairWorkload{big: 20_000, smalls: 10, small: 200, keys: keys}.run(b)
				var last time.Duration
				var before int
				for tenant, done := range out.done {
					if tenant != "big" && done > last {
						last, before = done, out.bigBefore[tenant]
					}
				}
				b.ReportMetric(out.throughput, "runs/s")
				b.ReportMetric(out.fairShare.Seconds(), "fair-share-s")
				b.ReportMetric(last.Seconds(), "last-small-done-s")
				b.ReportMetric(last.Seconds()/out.fairShare.Seconds(), "last-small/fair-share")
				b.ReportMetric(float64(before), "big-done-by-then")
				b.ReportMetric(out.done["big"].Seconds(), "big-done-s")
			}
		})
	}
}
