package main

import (
	"testing"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/store"
)

// tenure schedules lists, shows, pauses, resumes and triggers a schedule,
// each change audited; a schedule that does not exist is not found.
func TestCLI_SchedulesListShowPauseResumeTrigger(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := pgtest.Schema(t)
	if err := store.Migrate(t.Context(), pool, store.WithSchema(s)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), replaceSchemaName(`INSERT INTO {schema}.schedules (name, spec, time_zone, workflow, input)
		VALUES ('nightly', '@daily', 'Europe/Berlin', 'report', '{"all": true}')`, s)); err != nil {
		t.Fatal(err)
	}
	expect(t, tenure(t, s, "schedules", "backfill", "nightly", "--from", "72h"), 1, "not computed yet")
	// As a worker computes it: its next tick, tomorrow.
	if _, err := pool.Exec(t.Context(), replaceSchemaName(`UPDATE {schema}.schedules SET next_at = date_trunc('day', now()) + interval '1 day'`, s)); err != nil {
		t.Fatal(err)
	}
	expect(t, tenure(t, s, "schedules", "list"), 0, "nightly", "@daily", "Europe/Berlin", "report", "active")
	expect(t, tenure(t, s, "schedules", "pause", "nightly", "--note", "INC-12"), 0, "paused nightly")
	expect(t, tenure(t, s, "schedules", "list"), 0, "paused", "INC-12")
	expect(t, tenure(t, s, "schedules", "show", "nightly"), 0, "@daily in Europe/Berlin", "skip: skipped while the last run is open",
		"latest:", "changed by a person", "no tick decided yet")
	r := tenure(t, s, "schedules", "trigger", "nightly", "--note", "rerun")
	expect(t, r, 0, "triggered nightly: run ")
	if n := count(t, pool, s, `SELECT count(*) FROM {schema}.runs WHERE run_key LIKE 'schedule:nightly@%' AND input = '{"all": true}'`); n != 1 {
		t.Fatalf("%d runs of the trigger", n)
	}
	expect(t, tenure(t, s, "schedules", "show", "nightly"), 0, "triggered")
	expect(t, tenure(t, s, "schedules", "resume", "nightly"), 0, "resumed nightly")
	expect(t, tenure(t, s, "--json", "schedules", "list"), 0, `"name": "nightly"`, `"paused_at": null`)
	if n := count(t, pool, s, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'schedule'`); n != 5 {
		t.Fatalf("%d audit rows for a creation, its next tick by hand, a pause, a trigger and a resumption", n)
	}
	// The last three days' midnights, from before the schedule existed.
	expect(t, tenure(t, s, "schedules", "backfill", "nightly", "--from", "72h", "--dry-run"), 0, "would start 3 ticks of nightly")
	expect(t, tenure(t, s, "schedules", "backfill", "nightly", "--from", "72h", "--note", "INC-13"), 0, "started 3 ticks of nightly")
	expect(t, tenure(t, s, "schedules", "backfill", "nightly", "--from", "72h"), 0, "started 0 ticks of nightly")
	expect(t, tenure(t, s, "schedules", "show", "nightly"), 0, "backfilled")
	expect(t, tenure(t, s, "schedules", "backfill", "nightly"), 2, "--from")
	expect(t, tenure(t, s, "schedules", "backfill", "nightly", "--from", "1h", "--to", "2h"), 2, "ends")
	// Made and changed by a person, then deleted.
	expect(t, tenure(t, s, "schedules", "set", "hourly", "--spec", "@hourly"), 2, "--spec and --workflow")
	expect(t, tenure(t, s, "schedules", "set", "hourly", "--spec", "61 * * * *", "--workflow", "report"), 1, "out of range")
	expect(t, tenure(t, s, "schedules", "set", "hourly", "--spec", "@hourly", "--workflow", "report", "--input", `{"n": 1}`, "--note", "INC-14"), 0,
		"set hourly: @hourly in UTC starts report")
	expect(t, tenure(t, s, "schedules", "set", "hourly", "--spec", "15 * * * *", "--zone", "America/New_York"), 0,
		"set hourly: 15 * * * * in America/New_York starts report")
	expect(t, tenure(t, s, "schedules", "show", "hourly"), 0, "15 * * * * in America/New_York", `input {"n": 1}`, "changed by a person")
	expect(t, tenure(t, s, "schedules", "set", "hourly", "--spec", "15 * * * *"), 0, "has these settings already: nothing changed")
	expect(t, tenure(t, s, "schedules", "delete", "hourly", "--note", "INC-15"), 0, "deleted hourly")
	expect(t, tenure(t, s, "schedules", "delete", "hourly"), 3, "no such schedule")
	if got := count(t, pool, s, `SELECT count(*) FROM {schema}.audit_log WHERE action = 'schedule' AND filter->>'schedule' = 'hourly'`); got != 3 {
		t.Fatalf("%d audit rows for a creation, a change and a deletion", got)
	}
	expect(t, tenure(t, s, "schedules", "pause", "missing"), 3, "no such schedule")
	expect(t, tenure(t, s, "schedules", "show", "missing"), 3, "no such schedule")
	expect(t, tenure(t, s, "schedules", "show", "nightly", "--limit", "0"), 2, "--limit must be at least 1")
}
