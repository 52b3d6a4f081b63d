package runtime_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/sdk"
)

// A worker makes the coming days' partitions of steps and attempts when it
// starts (migration 22's function, hourly after that); one that cannot (a
// lock it waited 100 ms for) says so in its log, in words an on-call
// engineer can act on, and goes on running runs.
func TestWorker_MakesTheComingDaysPartitionsAndSaysWhenItCannot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	day := time.Now().UTC().AddDate(0, 0, 2).Format("20060102")
	e.exec(`DROP TABLE {schema}.steps_` + day + `, {schema}.attempts_` + day)
	e.worker(e.config(), echoWorkflow)
	eventually(t, "the day after tomorrow's partitions made again", func() bool {
		return q[int](e, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE c.relnamespace = $1::regnamespace AND c.relname IN ('steps_`+day+`', 'attempts_`+day+`')`, e.schema) == 2
	})

	// A session holds the DEFAULT partition of steps: the function waits
	// 100 ms for it, gives up, and the worker logs why.
	e.exec(`DROP TABLE {schema}.steps_` + day + `, {schema}.attempts_` + day)
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(e.ctx)) }()
	if _, err := tx.Exec(e.ctx, `LOCK TABLE `+pgx.Identifier{e.schema, "steps_default"}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	cfg := e.config()
	cfg.Label, cfg.Logger = "blocked", logs.logger()
	e.worker(cfg, echoWorkflow)
	eventually(t, "the blocked worker's warning", func() bool {
		return strings.Contains(logs.String(), "could not make the coming days' partitions of steps and attempts")
	})
	if l := logs.String(); !strings.Contains(l, "ensure_history_partitions") || !strings.Contains(l, "lock timeout") {
		t.Errorf("the warning does not say what failed and how to make them by hand:\n%s", l)
	}
	_ = tx.Rollback(e.ctx)
	// Runs go on (their rows' day has its partition).
	r, err := sdk.Start(e.ctx, e.client, echoWorkflow, in{N: 7})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := result(t, r); err != nil || out != 7 {
		t.Fatalf("a run after the warning: %d, %v", out, err)
	}
}
