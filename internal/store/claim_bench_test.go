package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
)

// BenchmarkClaim measures one claim of 10 runs of the registered workflow as
// the table around it grows: the claim finds candidates by index in order, per
// queue and workflow, so its cost must not grow with runs it cannot take. The
// cases share one schema and each adds rows to the previous one:
//
//   - registered=1000: 1,000 queued runs of the registered workflow;
//   - +unregistered=100000: plus 100,000 queued runs of a workflow no worker
//     registered, older than the registered ones and in the same queue;
//   - +expired=10000: plus 10,000 running runs of that workflow whose lease
//     expired (its workers died and none came back);
//   - +completed=1000000: plus 1,000,000 completed runs of the registered
//     workflow;
//   - +pinned=100000: plus 100,000 queued runs of the registered workflow
//     pinned to another build (sdk.WithPinning), due before the others.
//
// The claims are a worker's, of a build (so that they read the ranges of
// runs pinned to it too), pinning the workflow.
//
// ns/claim is the claim alone (the hand-back is not timed); ratio is ns/claim
// over the first case's. Compare the cases within one run:
//
//	go test ./store -run '^$' -bench Claim -benchtime 2000x
func BenchmarkClaim(b *testing.B) {
	st := newStore(b)
	worker := buildStore(b, st, "bench", "wf")
	load := func(query string, args ...any) {
		b.Helper()
		start := time.Now()
		if _, err := st.Pool().Exec(b.Context(), replaceSchema(query, st.Schema()), args...); err != nil {
			b.Fatal(err)
		}
		if _, err := st.Pool().Exec(b.Context(), replaceSchema(`ANALYZE {schema}.runs`, st.Schema())); err != nil {
			b.Fatal(err)
		}
		b.Logf("loaded in %v", time.Since(start).Round(time.Millisecond))
	}
	// Row IDs in insertion order, so that a million rows load in seconds.
	const seqID = `lpad(to_hex(i + $1::bigint), 32, '0')::uuid`
	var base, last float64
	run := func(name string) {
		b.Run(name, func(b *testing.B) {
			var claimed time.Duration
			ids := make([]uuid.UUID, 0, 10)
			for range b.N {
				start := time.Now()
				runs, err := worker.Claim(b.Context(), []string{"wf"}, []string{"default"}, 10, "bench", time.Minute)
				claimed += time.Since(start)
				if err != nil || len(runs) != 10 {
					b.Fatalf("claimed %d: %v", len(runs), err)
				}
				for _, r := range runs {
					if r.Workflow != "wf" || r.Reclaimed {
						b.Fatalf("claimed %+v", r)
					}
				}
				// Hand the runs back as a release does, in one untimed statement.
				b.StopTimer()
				ids = ids[:0]
				for _, r := range runs {
					ids = append(ids, r.ID)
				}
				_, err = st.Pool().Exec(b.Context(), replaceSchema(`
					UPDATE {schema}.runs
					SET status = 'queued', run_after = now(), claimant = NULL, lease_expires_at = NULL, updated_at = now()
					WHERE id = ANY ($1)`, st.Schema()), ids)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			last = float64(claimed.Nanoseconds()) / float64(b.N)
			ref := base
			if ref == 0 {
				ref = last
			}
			b.ReportMetric(last, "ns/claim")
			b.ReportMetric(last/ref, "ratio")
		})
		if base == 0 {
			base = last // the first case's final round
		}
	}

	load(`
		INSERT INTO {schema}.runs (id, workflow, input, run_after)
		SELECT `+seqID+`, 'wf', '{}', now() - i * interval '1 millisecond'
		FROM generate_series(1, 1000) AS i`, 0)
	run("registered=1000")

	load(`
		INSERT INTO {schema}.runs (id, workflow, input, run_after)
		SELECT `+seqID+`, 'unregistered', '{}', now() - interval '1 day' - i * interval '1 millisecond'
		FROM generate_series(1, 100000) AS i`, 1_000_000)
	run("+unregistered=100000")

	load(`
		INSERT INTO {schema}.runs (id, workflow, input, status, claimant, epoch, lease_expires_at, started_at)
		SELECT `+seqID+`, 'unregistered', '{}', 'running', 'dead', 1,
		       now() - interval '1 hour' - i * interval '1 millisecond', now() - interval '2 hours'
		FROM generate_series(1, 10000) AS i`, 2_000_000)
	run("+expired=10000")

	load(`
		INSERT INTO {schema}.runs (id, workflow, input, output, status, epoch, run_after, created_at, started_at, finished_at, updated_at)
		SELECT `+seqID+`, 'wf', '{}', '1', 'completed', 1, t, t, t, t + interval '1 second', t + interval '1 second'
		FROM generate_series(1, 1000000) AS i, LATERAL (SELECT now() - interval '3 days' + i * interval '100 milliseconds') AS x(t)`, 3_000_000)
	run("+completed=1000000")

	load(`
		INSERT INTO {schema}.runs (id, workflow, input, run_after, started_at, pinned_to)
		SELECT `+seqID+`, 'wf', '{}', now() - interval '1 day' - i * interval '1 millisecond', now() - interval '2 days', 'elsewhere'
		FROM generate_series(1, 100000) AS i`, 5_000_000)
	run("+pinned=100000")
}

// BenchmarkRenew measures the heartbeat's renewal of 1,000 held leases,
// with the worker's registry row, as a worker sends it each interval, while
// the table around it grows (each case adds to the previous one):
//
//   - held=1000: the 1,000 running runs alone;
//   - +completed=1000000: plus 1,000,000 completed runs, analyzed.
//
// At PostgreSQL's defaults (jit on), a renewal that the planner costs past
// jit_above_cost would be JIT-compiled at every beat (279 ms a renewal,
// before migration 9): ns/renewal must stay flat. Compare the cases within
// one run:
//
//	go test ./internal/store -run '^$' -bench Renew -benchtime 200x
func BenchmarkRenew(b *testing.B) {
	st := newStore(b)
	exec := func(query string, args ...any) {
		b.Helper()
		if _, err := st.Pool().Exec(b.Context(), replaceSchema(query, st.Schema()), args...); err != nil {
			b.Fatal(err)
		}
	}
	const held = 1000
	exec(`INSERT INTO {schema}.runs (id, workflow, input, status, claimant, epoch, lease_expires_at, started_at)
		SELECT gen_random_uuid(), 'wf', '{}', 'running', 'w', 1, now() + interval '1 hour', now()
		FROM generate_series(1, $1) AS i`, held)
	rows, err := st.Pool().Query(b.Context(), replaceSchema(`SELECT id FROM {schema}.runs WHERE status = 'running'`, st.Schema()))
	if err != nil {
		b.Fatal(err)
	}
	var leases []store.Lease
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		leases = append(leases, store.Lease{RunID: id, Epoch: 1})
	}
	if rows.Err() != nil || len(leases) != held {
		b.Fatalf("%d leases, %v", len(leases), rows.Err())
	}
	beat := &store.WorkerBeat{ID: uuid.New(), Label: "w", Host: "h", PID: 1, Version: "bench", Workflows: []string{"wf"},
		Queues: []string{"default"}, Concurrency: held, Held: held, Interval: time.Second, TTL: time.Minute}
	conn, err := st.Pool().Acquire(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	run := func(name string) {
		b.Run(name, func(b *testing.B) {
			var took time.Duration
			for range b.N {
				start := time.Now()
				got, err := st.Renew(b.Context(), conn.Conn(), leases, time.Hour, beat)
				took += time.Since(start)
				if err != nil || len(got) != held {
					b.Fatalf("renewed %d: %v", len(got), err)
				}
			}
			b.ReportMetric(float64(took.Nanoseconds())/float64(b.N), "ns/renewal")
		})
	}
	exec(`ANALYZE {schema}.runs`)
	run("held=1000")
	exec(`INSERT INTO {schema}.runs (id, workflow, input, output, status, epoch, created_at, started_at, finished_at)
		SELECT lpad(to_hex(i), 32, '0')::uuid, 'wf', '{}', '1', 'completed', 1, t, t, t
		FROM generate_series(1, 1000000) AS i, LATERAL (SELECT now() - interval '3 days' + i * interval '100 milliseconds') AS x(t)`)
	exec(`ANALYZE {schema}.runs`)
	run("+completed=1000000")
}

// BenchmarkClaimFair measures one claim of 10 runs where the registered
// workflow's queue holds fresh fair runs (migration 17), beside the claim
// of BenchmarkClaim's first case in the same schema:
//
//   - keyless=1000: 1,000 queued runs without a fairness key (as
//     BenchmarkClaim's registered=1000);
//   - fair=20000: another queue's 20,000 fair runs of 11 keys, one with
//     10,000 of them, claimed by a worker of that queue alone.
//
// Each claimed run is handed back fresh (started_at NULL), so that the
// fair runs stay in runs_fair_idx. Compare the cases within one run:
//
//	go test ./internal/store -run '^$' -bench ClaimFair -benchtime 2000x
func BenchmarkClaimFair(b *testing.B) {
	st := newStore(b)
	exec := func(query string, args ...any) {
		b.Helper()
		if _, err := st.Pool().Exec(b.Context(), replaceSchema(query, st.Schema()), args...); err != nil {
			b.Fatal(err)
		}
	}
	exec(`INSERT INTO {schema}.runs (id, workflow, input, run_after)
		SELECT gen_random_uuid(), 'wf', '{}', now() - i * interval '1 millisecond' FROM generate_series(1, 1000) AS i`)
	exec(`INSERT INTO {schema}.runs (id, workflow, queue, input, run_after, fair_key, fair_vt)
		SELECT gen_random_uuid(), 'wf', 'fair', '{}', now() - interval '1 hour',
		       CASE WHEN i <= 10000 THEN 'big' ELSE 'small-' || i % 10 END,
		       CASE WHEN i <= 10000 THEN i ELSE (i - 10000) / 10 + 1 END * 1000000::bigint
		FROM generate_series(1, 20000) AS i`)
	exec(`INSERT INTO {schema}.fair_queues (queue) VALUES ('fair')`)
	exec(`ANALYZE {schema}.runs`)
	for _, queue := range []string{"default", "fair"} {
		name := map[string]string{"default": "keyless=1000", "fair": "fair=20000"}[queue]
		b.Run(name, func(b *testing.B) {
			var claimed time.Duration
			ids := make([]uuid.UUID, 0, 10)
			for range b.N {
				start := time.Now()
				runs, err := st.Claim(b.Context(), []string{"wf"}, []string{queue}, 10, "bench", time.Minute)
				claimed += time.Since(start)
				if err != nil || len(runs) != 10 {
					b.Fatalf("claimed %d: %v", len(runs), err)
				}
				b.StopTimer()
				ids = ids[:0]
				for _, r := range runs {
					ids = append(ids, r.ID)
				}
				exec(`UPDATE {schema}.runs
					SET status = 'queued', run_after = now(), claimant = NULL, lease_expires_at = NULL, started_at = NULL, updated_at = now()
					WHERE id = ANY ($1)`, ids)
				b.StartTimer()
			}
			b.ReportMetric(float64(claimed.Nanoseconds())/float64(b.N), "ns/claim")
		})
	}
}
