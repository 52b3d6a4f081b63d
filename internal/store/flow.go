package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// FlowTake asks that an attempt be admitted under a downstream's limits
// before it starts (see AttemptStart.Take).
type FlowTake struct {
	Downstream string
	Key        string
	// Retry is set for an attempt after an error: it is charged to the
	// downstream's retry budget.
	Retry bool
	// Policy is, for a run's take of a workflow's concurrency key
	// (Write.Take), what a take that finds no room does: PolicyQueue,
	// PolicyCancelInProgress or PolicyCancelNewest; "" for an attempt's.
	Policy string
}

// Policies of a run's take (FlowTake.Policy), and the cause of the denial
// that tells a run to end cancelled (PolicyCancelNewest).
const (
	PolicyQueue            = "queue"
	PolicyCancelInProgress = "cancel-in-progress"
	PolicyCancelNewest     = "cancel-newest"
)

// FlowGive gives back what a run's last admitted attempt took, with how it
// ended (a Give* outcome), which counts for the downstream's breaker.
type FlowGive struct {
	Downstream string
	Key        string
	Outcome    string
	// Slot is the concurrency slot the take was given
	// (WriteResult.Slot), found by its primary key; 0 when not known (a
	// run's slot): it is looked for among the key's held slots.
	Slot int32
	// Step and Attempt are the attempt whose end the give carries (0: a
	// run's give, or not known): a write repeated after it may have
	// committed (Write.Again) counts the give's outcome only when this try
	// ends that attempt (sqlFlowAgain).
	Step, Attempt int32
}

// Outcomes of a FlowGive.
const (
	GiveOK    = "ok"    // the attempt succeeded
	GiveError = "error" // it ended in an error the downstream may be to blame for
	GiveNone  = "none"  // neither: interrupted, cancelled, refused before the call
	GiveRun   = "run"   // a run's end gives back its workflow's concurrency slot
)

// Denial is why a take was refused, and the run parked (see
// WriteResult.Denied).
type Denial struct {
	// Cause is concurrency, rate, breaker or retry-budget.
	Cause string
	// Wait is how long until the run is due again; NoDue when a release
	// wakes it (a slot given back, a breaker closed).
	Wait time.Duration
}

// flowParts are the columns of a commit's call of _flow.
type flowParts struct {
	giveRuns                           []uuidParam
	giveEpochs                         []int64
	giveDownstreams, giveKeys, giveOut []string
	giveSlots                          []*int32 // nil: not known
	giveSteps, giveAttempts            []int32  // the attempts the gives end; 0: not known
	takeRuns                           []uuidParam
	takeEpochs                         []int64
	takeSteps, takeAttempts            []int32
	takeDownstreams, takeKeys          []string
	takeRetries                        []bool
	takePolicies                       []string
	by                                 string
	again                              bool         // a take's write may have committed before (Write.Again)
	givesAgain                         bool         // a give's write may have (sqlFlowAgain)
	runTakes                           bool         // a take of a workflow's concurrency key (Write.Take)
	takes                              map[int]bool // write index -> has a take
}

func (f *flowParts) any() bool { return len(f.giveRuns)+len(f.takeRuns) > 0 }

// add gathers write i's give and take.
func (f *flowParts) add(i int, w *Write, id uuidParam, ep int64) {
	f.givesAgain = f.givesAgain || (w.Again && len(w.Gives) > 0)
	for _, g := range w.Gives {
		f.giveRuns, f.giveEpochs = append(f.giveRuns, id), append(f.giveEpochs, ep)
		f.giveDownstreams, f.giveKeys, f.giveOut = append(f.giveDownstreams, g.Downstream), append(f.giveKeys, g.Key), append(f.giveOut, g.Outcome)
		var slot *int32
		if g.Slot > 0 {
			slot = &g.Slot
		}
		f.giveSlots = append(f.giveSlots, slot)
		f.giveSteps, f.giveAttempts = append(f.giveSteps, g.Step), append(f.giveAttempts, g.Attempt)
	}
	t, step, attempt := w.Take, 0, 0
	f.runTakes = f.runTakes || w.Take != nil
	if a := w.StartAttempt; a != nil && a.Take != nil {
		t, step, attempt = a.Take, a.Step, a.Attempt
		if f.by == "" {
			f.by = a.Worker
		}
	}
	if t != nil {
		f.takeRuns, f.takeEpochs, f.takeSteps = append(f.takeRuns, id), append(f.takeEpochs, ep), append(f.takeSteps, int32(step))
		f.takeAttempts = append(f.takeAttempts, int32(attempt))
		f.takeDownstreams, f.takeKeys, f.takeRetries = append(f.takeDownstreams, t.Downstream), append(f.takeKeys, t.Key), append(f.takeRetries, t.Retry)
		f.takePolicies = append(f.takePolicies, t.Policy)
		f.again = f.again || w.Again
		if f.takes == nil {
			f.takes = map[int]bool{}
		}
		f.takes[i] = true
	}
}

// sqlFlow takes and gives back a batch's capacity (migration 29's _flow_commit: the
// common batch in three statements, else migration 28's _flow_batch),
// before the batch's starts of attempts: a denied take's run is parked by
// it, and the start's fence then finds the run no longer running.
const sqlFlow = `SELECT run_id, epoch, cause, wait_ms, slot FROM {schema}._flow_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
	$19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29)`

// sqlFlowAgain is sqlFlow for a batch that repeats a write with gives whose
// first try may have committed (Write.Again). An outcome (ok, error) counts
// for the breaker only when this try ends the give's attempt: the attempt
// is still running (a run's end, later in the batch, closes it) or was
// closed by this transaction (ended_at = now(): the ends of attempts run
// before this statement, and close only a running attempt). Else the first
// try committed, and counted it: the give counts for nothing ('none')
// here. Its slot's release is idempotent already. A give whose attempt is
// not known ($17, $18: 0) counts as before. One lookup by the attempts'
// primary key per give, for repeats only.
const sqlFlowAgain = `SELECT run_id, epoch, cause, wait_ms, slot FROM {schema}._flow_commit($1, $2, $3, $4,
	ARRAY(SELECT CASE WHEN x.o IN ('ok', 'error') AND x.s > 0 AND NOT EXISTS (
	                      SELECT 1 FROM {schema}.attempts a
	                      WHERE (a.run_id, a.step, a.attempt) >= (x.r, x.s, x.a) AND (a.run_id, a.step, a.attempt) <= (x.r, x.s, x.a)
	                        AND a.epoch = x.e AND (a.status = 'running' OR a.ended_at = now()) OFFSET 0)
	                  THEN 'none' ELSE x.o END
	      FROM unnest($1::uuid[], $2::bigint[], $5::text[], $17::int[], $18::int[]) WITH ORDINALITY AS x(r, e, o, s, a, n)
	      ORDER BY x.n),
	$6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29)`

func (f *flowParts) queue(s *Store, b *pgx.Batch) {
	args := []any{f.giveRuns, f.giveEpochs, f.giveDownstreams, f.giveKeys, f.giveOut,
		f.takeRuns, f.takeEpochs, f.takeSteps, f.takeAttempts, f.takeDownstreams, f.takeKeys, f.takeRetries, f.takePolicies, f.by, f.again, f.giveSlots,
		f.giveSteps, f.giveAttempts}
	args = append(args, f.fastArgs()...)
	args = append(args, s.WakeTarget()) // $29: the worker the runs its gives wake are announced to
	if f.givesAgain {
		b.Queue(s.sql(sqlFlowAgain), args...)
		return
	}
	b.Queue(s.sql(sqlFlow), args...)
}

// fastArgs are _flow_commit's arguments for its fast path (migration 29):
// whether the batch may take it (no repeat, no workflow's concurrency key:
// the database decides the rest), and the batch counted by downstream (its
// takes, retries, and the gives' calls, errors, and errors after the last
// success, -1 when none succeeded) and by key (its takes). The database
// sorts them, as it locks their rows in its own order.
func (f *flowParts) fastArgs() []any {
	slow := []any{false, nil, nil, nil, nil, nil, nil, nil, nil, nil}
	if f.again || f.givesAgain || f.runTakes {
		return slow
	}
	type dsCount struct{ takes, retries, calls, errors, tail int32 }
	type key struct{ d, k string }
	byDS := map[string]*dsCount{}
	var ds []string
	counts := func(d string) *dsCount {
		c := byDS[d]
		if c == nil {
			c = &dsCount{tail: -1}
			byDS[d] = c
			ds = append(ds, d)
		}
		return c
	}
	byKey := map[key]int32{}
	var keys []key
	seen := func(k key) {
		if _, ok := byKey[k]; !ok {
			byKey[k] = 0
			keys = append(keys, k)
		}
	}
	for i, d := range f.giveDownstreams {
		switch c := counts(d); f.giveOut[i] {
		case GiveOK:
			c.calls++
			c.tail = 0
		case GiveError:
			c.calls++
			c.errors++
			if c.tail >= 0 {
				c.tail++
			}
		case GiveRun: // a run's end gives its workflow's key back
			return slow
		}
		seen(key{d, f.giveKeys[i]})
	}
	for i, d := range f.takeDownstreams {
		c := counts(d)
		c.takes++
		if f.takeRetries[i] {
			c.retries++
		}
		k := key{d, f.takeKeys[i]}
		seen(k)
		byKey[k]++
	}
	n := len(ds)
	takes, retries, calls, errs, tails := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	for i, d := range ds {
		c := byDS[d]
		takes[i], retries[i], calls[i], errs[i], tails[i] = c.takes, c.retries, c.calls, c.errors, c.tail
	}
	kd, kk, kt := make([]string, len(keys)), make([]string, len(keys)), make([]int32, len(keys))
	for i, k := range keys {
		kd[i], kk[i], kt[i] = k.d, k.k, byKey[k]
	}
	return []any{true, ds, takes, retries, calls, errs, tails, kd, kk, kt}
}

// read reads _flow's answer: the takes it denied, and the slots of those
// it admitted.
func (f *flowParts) read(res pgx.BatchResults) (map[Lease]Denial, map[Lease]int32, error) {
	rows, err := res.Query()
	if err != nil {
		return nil, nil, err
	}
	denied, slots := map[Lease]Denial{}, map[Lease]int32{}
	var id [16]byte
	var epoch int64
	var cause *string
	var wait *float64
	var slot *int32
	_, err = pgx.ForEachRow(rows, []any{&id, &epoch, &cause, &wait, &slot}, func() error {
		if cause == nil {
			if slot != nil {
				slots[Lease{RunID: id, Epoch: epoch}] = *slot
			}
			return nil
		}
		d := Denial{Cause: *cause, Wait: NoDue}
		if wait != nil {
			d.Wait = time.Duration(*wait * float64(time.Millisecond))
		}
		denied[Lease{RunID: id, Epoch: epoch}] = d
		return nil
	})
	return denied, slots, err
}

// DeclareDownstream writes the row of a downstream as code declares it
// (limits: flow.Limits' JSON), applied unless a person changed its limits;
// by is the worker's label.
// holds is "attempt" for an activities' downstream, "run" for a workflow's
// concurrency key.
func (s *Store) DeclareDownstream(ctx context.Context, name string, limits []byte, by, holds string) error {
	_, err := s.pool.Exec(ctx, s.sql(`SELECT {schema}.declare_downstream($1, $2::jsonb, $3, $4)`), name, string(limits), by, holds)
	return s.wrap("declare downstream "+name, err)
}

// DownstreamState is a downstream's breaker and load, as FlowSweep reads
// it. Waiting is known (Counted) when the sweep counted the waits, or when
// none is open.
type DownstreamState struct {
	Name    string
	Breaker string
	Waiting int64
	Counted bool
	InUse   int64
}

// sqlFlowSweep gives back the capacity of dead workers and wakes breakers'
// probes (migration 29's _flow_sweep, flow_sweep's body), counting the
// waits when $2 is set.
const sqlFlowSweep = `SELECT downstream, breaker, waiting, in_use FROM {schema}._flow_sweep($1, $2)`

// FlowSweep gives back capacity that no release gave back (held by runs
// whose lease expired) and wakes the probes of breakers whose probe never
// came, for the downstreams named; it returns their state, with the steps
// waiting on each when counts is set (a lookup per step waiting) or when
// none is.
func (s *Store) FlowSweep(ctx context.Context, names []string, counts bool) ([]DownstreamState, error) {
	b := &pgx.Batch{}
	var out []DownstreamState
	b.Queue(s.sql(sqlFlowSweep), names, counts).Query(func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (DownstreamState, error) {
			var d DownstreamState
			var waiting *int64
			err := row.Scan(&d.Name, &d.Breaker, &waiting, &d.InUse)
			if waiting != nil {
				d.Waiting, d.Counted = *waiting, true
			}
			return d, err
		})
		return err
	})
	if err := s.send(ctx, s.pool, planWrite, b).Close(); err != nil {
		return nil, s.wrap("sweep downstreams", err)
	}
	return out, nil
}
