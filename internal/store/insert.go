package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// NewRun is what Start records for a new run.
type NewRun struct {
	ID          uuid.UUID
	Workflow    string
	Queue       string
	Priority    int
	Key         string // empty: no caller key
	Input       []byte // JSON
	Delay       time.Duration
	Traceparent string
	// FairKey, when not empty, makes the run a fair run of its queue: it
	// is claimed in the order of a virtual time that advances by
	// FairStride / FairWeight per run of the key (see migration 17).
	FairKey    string
	FairWeight int // 1 to MaxFairWeight; 0 without FairKey
}

// FairStride is the virtual time a fair run of weight 1 costs its key; a
// run of weight w costs FairStride / w.
const FairStride = 1_000_000

// MaxFairWeight is the largest fairness weight: the stride of a heavier
// one would round to nothing.
const MaxFairWeight = FairStride

// MaxFairKey is the longest fairness key, in bytes.
const MaxFairKey = 200

// Inserted is the outcome of recording one NewRun: the run that now holds its
// key. Created is false when a run with the same key already existed (or came
// earlier in the same call); ID and Workflow are then that run's, and
// OtherInput says whether that run was started with another input.
type Inserted struct {
	ID       uuid.UUID
	Workflow string
	Created  bool
	// OtherInput is true when Created is false and the run holding the key
	// has an input that differs from this NewRun's as a JSON value (jsonb
	// equality: key order and spacing do not count).
	OtherInput bool
}

// InsertRun records one queued run on db (the pool, or the caller's
// transaction for StartTx); see InsertRuns, which also says whether a run
// that already held the key has another input (Inserted.OtherInput).
func (s *Store) InsertRun(ctx context.Context, db DB, r NewRun) (id uuid.UUID, workflow string, created bool, err error) {
	out, err := s.InsertRuns(ctx, db, []NewRun{r})
	if err != nil {
		return uuid.Nil, "", false, err
	}
	return out[0].ID, out[0].Workflow, out[0].Created, nil
}

// InsertRuns records queued runs on db (the pool, or the caller's transaction)
// and announces them to idle workers, returning one Inserted per run in order.
// With a caller key a run is idempotent: when a run with that key exists,
// nothing is inserted for it and the existing run is returned with Created
// false (and OtherInput true when its input differs); items of one call
// sharing a key make one run, created by the first.
//
// Every run is also idempotent by its ID, so that a call whose outcome the
// caller did not see (the connection was lost during COMMIT) can be sent
// again with the same runs: a run already recorded under its ID is not
// inserted again and is reported with Created true, since its IDs are fresh
// (uuid v7, made for this call) and only an earlier try of the same call can
// have recorded it. An earlier try still in flight on the server is waited
// for, as for a key.
//
// However many runs, it is at most two statements (insert and notice, then a
// lookup only when some runs have keys) sent as one batch, behind the planner
// settings (planHot: no JIT): on the pool that is one implicit transaction,
// so one commit and one round trip, and either every run is recorded or
// none. In the caller's transaction, JIT is off for these statements alone.
func (s *Store) InsertRuns(ctx context.Context, db DB, runs []NewRun) ([]Inserted, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	ins := s.newInsert(runs)
	br := s.send(ctx, db, planHot, ins.batch())
	err := ins.read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, s.wrap("insert runs", err)
	}
	return ins.results(ctx, db)
}

// ErrKeyBusy is returned by InsertRunsBounded when a run's key (or its
// fairness key's row) is held by a transaction still open after the wait:
// nothing was recorded.
var ErrKeyBusy = errors.New("run key held by an open transaction")

// InsertRunsBounded is InsertRuns on the pool, except that it waits at most
// wait for a concurrent insert of one of the runs' keys to commit or roll
// back (a StartTx whose transaction is still open), then returns ErrKeyBusy
// and records nothing. A client recording many callers' runs together uses it
// so that one caller's busy key does not stall the others.
func (s *Store) InsertRunsBounded(ctx context.Context, runs []NewRun, wait time.Duration) ([]Inserted, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	ins := s.newInsert(runs)
	b := ins.batch()
	locks := len(ins.keys) > 0 || ins.fair // a fairness key's row is locked as a run key is
	if locks {
		// Local to the batch's implicit transaction: the pooled connection
		// keeps its own setting.
		b.QueuedQueries = append([]*pgx.QueuedQuery{{
			SQL:       `SELECT set_config('lock_timeout', $1, true)`,
			Arguments: []any{fmt.Sprintf("%dms", max(wait.Milliseconds(), 1))},
		}}, b.QueuedQueries...)
	}
	br := s.send(ctx, s.pool, planHot, b)
	var err error
	if locks {
		_, err = br.Exec()
	}
	if err == nil {
		err = ins.read(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return nil, fmt.Errorf("insert runs: %w: %w", ErrKeyBusy, err)
	}
	if err != nil {
		return nil, s.wrap("insert runs", err)
	}
	return ins.results(ctx, s.pool)
}

// insert is one InsertRuns call: the columns it sends and what came back.
type insert struct {
	s    *Store
	runs []NewRun
	// first[i] is the index of the first item with runs[i]'s key (i itself
	// when keyless or first): only first items are sent.
	first []int

	// Columns of the items sent, in types every query execution mode
	// encodes (see params.go). UUIDs go as pgtype.UUID, which pgx encodes
	// directly; uuid.UUID would go through driver.Valuer as text.
	ids                           []uuidParam
	workflows, queues, traceparts []string
	keyCol                        []pgtype.Text // NULL for a keyless run
	priorities                    []int32
	inputs                        []jsonParam
	delays                        []int64
	keys                          []string      // distinct keys sent
	keyedIDs                      []uuidParam   // their IDs
	fairKeys                      []pgtype.Text // NULL for a run without a fairness key
	strides                       []int64       // FairStride / weight; 0 without a fairness key
	fair                          bool          // some run has a fairness key

	created  map[[16]byte]bool
	existing map[string]Inserted // by key: runs that held a key before this call
	earlier  map[[16]byte]string // by ID, their workflow: runs an earlier try of this call recorded
}

func (s *Store) newInsert(runs []NewRun) *insert {
	n := len(runs)
	ins := &insert{
		s: s, runs: runs, first: make([]int, n),
		ids: make([]uuidParam, 0, n), workflows: make([]string, 0, n), queues: make([]string, 0, n),
		traceparts: make([]string, 0, n), keyCol: make([]pgtype.Text, 0, n), priorities: make([]int32, 0, n),
		inputs: make([]jsonParam, 0, n), delays: make([]int64, 0, n),
		fairKeys: make([]pgtype.Text, 0, n), strides: make([]int64, 0, n),
	}
	var byKey map[string]int
	for i, r := range runs {
		ins.first[i] = i
		if r.Key != "" {
			if j, ok := byKey[r.Key]; ok {
				ins.first[i] = j
				continue
			}
			if byKey == nil {
				byKey = map[string]int{}
			}
			byKey[r.Key] = i
			ins.keys = append(ins.keys, r.Key)
			ins.keyedIDs = append(ins.keyedIDs, uuidArg(r.ID))
		}
		ins.ids = append(ins.ids, uuidArg(r.ID))
		ins.workflows = append(ins.workflows, r.Workflow)
		ins.queues = append(ins.queues, r.Queue)
		ins.keyCol = append(ins.keyCol, pgtype.Text{String: r.Key, Valid: r.Key != ""})
		ins.priorities = append(ins.priorities, int32(r.Priority))
		ins.inputs = append(ins.inputs, jsonArg(r.Input))
		ins.delays = append(ins.delays, r.Delay.Milliseconds())
		ins.traceparts = append(ins.traceparts, r.Traceparent)
		var stride int64
		if r.FairKey != "" {
			ins.fair, stride = true, FairStride/int64(r.FairWeight)
		}
		ins.fairKeys = append(ins.fairKeys, pgtype.Text{String: r.FairKey, Valid: r.FairKey != ""})
		ins.strides = append(ins.strides, stride)
	}
	return ins
}

// batch returns the statements of the call.
func (ins *insert) batch() *pgx.Batch {
	s := ins.s
	b := &pgx.Batch{}
	// ON CONFLICT DO NOTHING waits for a concurrent insert of the same key to
	// commit or roll back, so two Starts with one key never make two runs.
	// It has no conflict target so that it covers the primary key too: a
	// retry of a call whose first try committed unseen inserts nothing
	// again, with or without keys (see InsertRuns).
	// One NOTIFY per call, and only when a run is due now: workers claim
	// whatever is due, so the payload (the queues) is a courtesy.
	args := []any{ins.ids, ins.workflows, ins.queues, ins.priorities, ins.keyCol, ins.inputs, ins.delays, ins.traceparts,
		s.RunsChannel()}
	if ins.fair {
		b.Queue(s.sql(sqlInsertFair), append(args, ins.fairKeys, ins.strides)...)
	} else {
		b.Queue(s.sql(sqlInsert), args...)
	}
	if len(ins.keys) > 0 {
		// The runs that held a key before this call, and whether their input
		// differs (as jsonb) from the one sent with the key. It runs after
		// the insert in the same transaction with a snapshot of its own, so
		// it sees a concurrent insert the ON CONFLICT above waited for.
		b.Queue(s.sql(`
			SELECT r.run_key, r.id, r.workflow, r.input <> k.input FROM {schema}.runs r
			JOIN unnest($3::text[], $4::jsonb[]) AS k(run_key, input) ON k.run_key = r.run_key
			WHERE r.run_key = ANY($1::text[]) AND r.id <> ALL($2::uuid[])`),
			ins.keys, ins.keyedIDs, ins.keyCol, ins.inputs)
	}
	return b
}

// sqlInsert records runs without fairness keys; see batch.
const sqlInsert = `
		WITH ins AS (
			INSERT INTO {schema}.runs (id, workflow, queue, priority, run_key, input, run_after, traceparent)
			SELECT id, workflow, queue, priority, run_key, input,
			       now() + delay_ms * interval '1 millisecond', nullif(traceparent, '')
			FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[], $5::text[], $6::jsonb[], $7::bigint[], $8::text[])
			     AS r(id, workflow, queue, priority, run_key, input, delay_ms, traceparent)
			ON CONFLICT DO NOTHING
			RETURNING id, queue, run_after <= now() AS due)
		SELECT coalesce((SELECT array_agg(id) FROM ins), '{}'),
		       CASE WHEN EXISTS (SELECT FROM ins WHERE due)
		            THEN pg_notify($9, (SELECT string_agg(DISTINCT queue, ',') FROM ins WHERE due)) END::text`

// sqlInsertFair is sqlInsert for a call where some runs have a fairness
// key ($10, NULL for the others, each with its stride in $11). Each key of
// a queue advances its last virtual time by the strides of its runs in the
// call, from its own or from the queue's clock, whichever is later (fk:
// greatest(last_vt, clock) + total = greatest(last_vt - clock, 0) + clock +
// total), and its runs take consecutive virtual times below the new one, in
// the order of the call. The keys' rows are locked in (queue, key) order,
// so that two calls with the same keys cannot deadlock; a concurrent insert
// of a key waits for this one to commit, and reads its last_vt then.
//
// A run not inserted (its caller key or ID was recorded already) is
// charged all the same: a repeated Start delays its key by one stride.
const sqlInsertFair = `
		WITH r AS (
			SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[], $5::text[], $6::jsonb[], $7::bigint[], $8::text[],
			                     $10::text[], $11::bigint[]) WITH ORDINALITY
			     AS r(id, workflow, queue, priority, run_key, input, delay_ms, traceparent, fair_key, stride, n)),
		t AS (
			SELECT r.queue, r.fair_key, sum(r.stride)::bigint AS total,
			       coalesce((SELECT q.vt FROM {schema}.fair_queues q WHERE q.queue = r.queue), 0) AS clock
			FROM r WHERE r.fair_key IS NOT NULL GROUP BY r.queue, r.fair_key),
		fq AS (
			INSERT INTO {schema}.fair_queues (queue)
			SELECT DISTINCT t.queue FROM t
			WHERE NOT EXISTS (SELECT FROM {schema}.fair_queues q WHERE q.queue = t.queue)
			ON CONFLICT DO NOTHING),
		fk AS (
			INSERT INTO {schema}.fair_keys AS k (queue, key, last_vt)
			SELECT t.queue, t.fair_key, t.clock + t.total FROM t ORDER BY t.queue, t.fair_key
			ON CONFLICT (queue, key) DO UPDATE
			SET last_vt = greatest(k.last_vt - coalesce((SELECT q.vt FROM {schema}.fair_queues q WHERE q.queue = k.queue), 0), 0)
			            + excluded.last_vt
			RETURNING k.queue, k.key, k.last_vt),
		ins AS (
			INSERT INTO {schema}.runs (id, workflow, queue, priority, run_key, input, run_after, traceparent, fair_key, fair_vt)
			SELECT r.id, r.workflow, r.queue, r.priority, r.run_key, r.input,
			       now() + r.delay_ms * interval '1 millisecond', nullif(r.traceparent, ''), r.fair_key,
			       fk.last_vt - t.total + sum(r.stride) OVER (PARTITION BY r.queue, r.fair_key ORDER BY r.n)
			FROM r
			LEFT JOIN t ON t.queue = r.queue AND t.fair_key = r.fair_key
			LEFT JOIN fk ON fk.queue = r.queue AND fk.key = r.fair_key
			ON CONFLICT DO NOTHING
			RETURNING id, queue, run_after <= now() AS due)
		SELECT coalesce((SELECT array_agg(id) FROM ins), '{}'),
		       CASE WHEN EXISTS (SELECT FROM ins WHERE due)
		            THEN pg_notify($9, (SELECT string_agg(DISTINCT queue, ',') FROM ins WHERE due)) END::text`

// read reads the batch's results.
func (ins *insert) read(br pgx.BatchResults) error {
	var created [][16]byte
	if err := br.QueryRow().Scan(&created, new(*string)); err != nil {
		return err
	}
	ins.setCreated(created)
	if len(ins.keys) == 0 {
		return nil
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	return ins.readExisting(rows)
}

func (ins *insert) setCreated(ids [][16]byte) {
	ins.created = make(map[[16]byte]bool, len(ids))
	for _, id := range ids {
		ins.created[id] = true
	}
}

func (ins *insert) readExisting(rows pgx.Rows) error {
	ins.existing = map[string]Inserted{}
	var key string
	var r Inserted
	_, err := pgx.ForEachRow(rows, []any{&key, (*[16]byte)(&r.ID), &r.Workflow, &r.OtherInput}, func() error {
		ins.existing[key] = r
		return nil
	})
	return err
}

// findEarlier looks up by ID the runs that were neither inserted nor found by
// key: an earlier try of this call recorded them (see InsertRuns). It costs a
// round trip only after such a try. On the pool it runs after the batch has
// committed, and the insert waited for the earlier try to end, so it sees
// what that try recorded.
func (ins *insert) findEarlier(ctx context.Context, db DB) error {
	var missing []uuidParam
	for i, r := range ins.runs {
		if ins.first[i] != i || ins.created[r.ID] {
			continue
		}
		if _, ok := ins.existing[r.Key]; ok && r.Key != "" {
			continue
		}
		missing = append(missing, uuidArg(r.ID))
	}
	if len(missing) == 0 {
		return nil
	}
	ins.earlier = map[[16]byte]string{}
	var id [16]byte
	var workflow string
	return ins.s.query(ctx, db, planHot, func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&id, &workflow}, func() error {
			ins.earlier[id] = workflow
			return nil
		})
		return err
	}, ins.s.sql(`SELECT id, workflow FROM {schema}.runs WHERE id = ANY($1::uuid[])`), missing)
}

// results maps what came back to one Inserted per run.
func (ins *insert) results(ctx context.Context, db DB) ([]Inserted, error) {
	if err := ins.findEarlier(ctx, db); err != nil {
		return nil, ins.s.wrap("insert runs: find runs of an earlier try", err)
	}
	out := make([]Inserted, len(ins.runs))
	for i, r := range ins.runs {
		if j := ins.first[i]; j != i {
			out[i] = Inserted{ID: out[j].ID, Workflow: out[j].Workflow, OtherInput: out[j].OtherInput}
			continue
		}
		if ins.created[r.ID] {
			out[i] = Inserted{ID: r.ID, Workflow: r.Workflow, Created: true}
			continue
		}
		if workflow, ok := ins.earlier[r.ID]; ok {
			out[i] = Inserted{ID: r.ID, Workflow: workflow, Created: true}
			continue
		}
		e, ok := ins.existing[r.Key]
		if r.Key == "" || !ok {
			// The conflicting run was deleted between the insert and the
			// lookup (a purge): report it rather than invent an outcome.
			return nil, fmt.Errorf("insert runs: run %s with key %q was neither inserted nor found", r.ID, r.Key)
		}
		out[i] = e
	}
	if err := ins.compareRepeats(ctx, db, out); err != nil {
		return nil, ins.s.wrap("insert runs: compare inputs of a repeated key", err)
	}
	return out, nil
}

// compareRepeats sets OtherInput on the items of the call that repeat an
// earlier item's key with an input of other bytes: it compares each, as
// jsonb, with the input of the run that holds the key. An item with the same
// bytes as the earlier one has its outcome already. It costs a round trip
// only when there are such items.
func (ins *insert) compareRepeats(ctx context.Context, db DB, out []Inserted) error {
	var items []int32
	var ids, inputs []string // as text: every query execution mode sends text as text
	for i, r := range ins.runs {
		if j := ins.first[i]; j != i && !bytes.Equal(r.Input, ins.runs[j].Input) {
			items = append(items, int32(i))
			ids, inputs = append(ids, out[i].ID.String()), append(inputs, string(r.Input))
		}
	}
	if len(items) == 0 {
		return nil
	}
	found := 0
	var item int32
	var other bool
	if err := ins.s.query(ctx, db, planHot, func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&item, &other}, func() error {
			out[item].OtherInput = other
			found++
			return nil
		})
		return err
	}, ins.s.sql(`
		SELECT d.item, r.input <> d.input::jsonb
		FROM unnest($1::int[], $2::text[], $3::text[]) AS d(item, id, input)
		JOIN {schema}.runs r ON r.id = d.id::uuid`), items, ids, inputs); err != nil {
		return err
	}
	if found != len(items) {
		return fmt.Errorf("%d of %d runs holding a repeated key were not found", len(items)-found, len(items))
	}
	return nil
}
