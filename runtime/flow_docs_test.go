package runtime_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/activities"
	"github.com/tenurehq/tenure/flow"
	"github.com/tenurehq/tenure/sdk"
)

// sqlBlock finds the ```sql blocks of a Markdown file.
var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")

type charge struct {
	Account string
	Hold    int // from 1: the call waits for the test's release[Hold-1]
}

// TestDocs_FlowControlQueriesRunAsWritten runs every sql block of
// docs/flow-control.md, in order, against a schema where a worker has
// really throttled steps: one run waited for a concurrency slot and ran,
// another holds the slot and a third waits for it while the queries that
// look run; then the blocks that change limits and breakers do, and are
// audited as the page says.
func TestDocs_FlowControlQueriesRunAsWritten(t *testing.T) {
	doc, err := os.ReadFile("../docs/flow-control.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := sqlBlock.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 12 {
		t.Fatalf("found %d sql blocks in docs/flow-control.md; the parser or the page is broken", len(blocks))
	}

	e := newEnv(t)
	payments := flow.New("payments", flow.Concurrency(1))
	release := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	act := activities.New("charge", func(ctx context.Context, c charge) (string, error) {
		if c.Hold > 0 {
			select {
			case <-release[c.Hold-1]:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "ch_" + c.Account, nil
	}).Calls(payments, func(c charge) string { return c.Account })
	wf := sdk.NewWorkflow("pay", func(ctx context.Context, c charge) (string, error) { return sdk.Execute(ctx, act, c) })
	w := e.worker(e.config(), wf)
	start := func(c charge) *sdk.Run[string] {
		t.Helper()
		r, err := sdk.Start(e.ctx, e.client, wf, c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	waiting := func() int64 {
		return fscalar[int64](e, `SELECT count(*) FROM {schema}.waiting_runs WHERE waiting_for = 'limit:payments'`)
	}

	// A run that waited for the slot, then ran: its attempt was throttled.
	holder := start(charge{Account: "acct-1", Hold: 1})
	eventually(t, "the first run holds the slot", func() bool {
		return fscalar[int64](e, `SELECT coalesce((SELECT in_use FROM {schema}.downstream_status WHERE name = 'payments'), 0)`) == 1
	})
	waited := start(charge{Account: "acct-1"})
	eventually(t, "the second run waits for the slot", func() bool { return waiting() == 1 })
	close(release[0])
	for _, r := range []*sdk.Run[string]{holder, waited} {
		if _, err := result(t, r); err != nil {
			t.Fatal(err)
		}
	}
	// While the page's queries look: one run holds the slot, one waits.
	holding := start(charge{Account: "acct-1", Hold: 2})
	eventually(t, "a run holds the slot again", func() bool {
		return fscalar[int64](e, `SELECT coalesce((SELECT in_use FROM {schema}.downstream_status WHERE name = 'payments'), 0)`) == 1
	})
	queued := start(charge{Account: "acct-1"})
	eventually(t, "a run waits again", func() bool { return waiting() == 1 })

	schema := pgx.Identifier{e.schema}.Sanitize() + "."
	looking := true // the blocks before the first change see the live state
	for i, b := range blocks {
		q := strings.ReplaceAll(b[1], "tenure.", schema)
		q = strings.ReplaceAll(q, ":'run_id'", "'"+waited.ID.String()+"'::uuid")
		changes := regexp.MustCompile(`(set|reset)_downstream\(|(open|close)_breaker\(`).MatchString(q)
		looking = looking && !changes
		rows, err := e.pool.Query(e.ctx, q)
		if err != nil {
			t.Fatalf("block %d:\n%s\n%v", i+1, b[1], err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("block %d:\n%s\n%v", i+1, b[1], err)
		}
		if looking && n == 0 {
			t.Errorf("block %d returns no row while a run holds the slot and one waits:\n%s", i+1, b[1])
		}
	}

	// The page's changes are audited as it says, and undone by its reset.
	limits := fscalar[string](e, `SELECT string_agg(filter->>'by' || ': ' || coalesce(note, '-'), '; ' ORDER BY id)
		FROM {schema}.audit_log WHERE action = 'limits' AND filter->>'downstream' = 'payments'`)
	if want := "declaration by " + w.Label() + ": -; person: INC-4711: the provider asks for 10/s; person: INC-4711: rate limit lifted; " +
		"reset to the declaration: INC-4711 closed"; limits != want {
		t.Errorf("limits audit:\n%s\nwant\n%s", limits, want)
	}
	breaker := fscalar[string](e, `SELECT string_agg(from_state || '>' || to_state || ' by ' || by || ': ' || why, '; ' ORDER BY id)
		FROM {schema}.breaker_history WHERE downstream = 'payments'`)
	if want := "closed>open by person: INC-4711: provider down, stop calling; open>closed by person: INC-4711: provider back"; breaker != want {
		t.Errorf("breaker history: %s, want %s", breaker, want)
	}
	if got := fscalar[string](e, `SELECT format('%s %s %s', concurrency, coalesce(rate::text, 'no rate'), (overridden_at IS NULL)::text)
		FROM {schema}.downstream_status WHERE name = 'payments'`); got != "1 no rate true" {
		t.Errorf("after the reset: %s, want the declaration (concurrency 1, no rate) and no override", got)
	}

	close(release[1])
	for _, r := range []*sdk.Run[string]{holding, queued} {
		if _, err := result(t, r); err != nil {
			t.Fatal(err)
		}
	}
	if n := fscalar[int64](e, `SELECT count(*) FROM {schema}.attempts`); n != 4 {
		t.Errorf("%d attempts for 4 runs: a wait is not an attempt", n)
	}
	if s := fscalar[float64](e, `SELECT extract(epoch FROM throttled_for) FROM {schema}.attempt_timeline WHERE run_id = $1 AND throttled_by = 'concurrency'`, waited.ID); s <= 0 {
		t.Errorf("the run that waited shows throttled_for %vs", s)
	}
}
