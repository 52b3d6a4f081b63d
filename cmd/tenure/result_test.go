package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"
)

// TestCLI_ResultReadsTheRunsPayloadsOnceNotAtEveryPoll: a run with an input
// large enough to live in the runs table's TOAST table is waited for, with
// --follow (which polls most often), for a second and a half; the TOAST
// blocks read meanwhile are about those of reading the run once, as runs
// result of the ended run does, not one such read per poll.
func TestCLI_ResultReadsTheRunsPayloadsOnceNotAtEveryPoll(t *testing.T) {
	f := newFixtures(t)
	s := f.schema
	noise := make([]byte, 150_000) // random: no compression brings it under the TOAST threshold
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	input, _ := json.Marshal(map[string]string{"blob": base64.StdEncoding.EncodeToString(noise)})
	id := f.run("export", "queued", "")
	f.exec(`UPDATE {schema}.runs SET input = $2 WHERE id = $1`, id, string(input))

	// The TOAST blocks of runs read so far, once every backend that read
	// them has reported it (a backend reports at its exit, or about every
	// second: read until two reads a while apart agree).
	toast := func() int64 {
		t.Helper()
		var last int64 = -1
		for range 50 {
			var n int64
			f.query(`SELECT coalesce(toast_blks_hit, 0) + coalesce(toast_blks_read, 0) FROM pg_statio_user_tables
				WHERE schemaname = $1 AND relname = 'runs'`, []any{s}, &n)
			if n == last {
				return n
			}
			last = n
			time.Sleep(1200 * time.Millisecond)
		}
		t.Fatal("the statistics of the runs table never settled")
		return 0
	}

	before := toast()
	ended := make(chan error, 1)
	go func() { // as a worker ends a run: the row, then the notice
		time.Sleep(1500 * time.Millisecond)
		_, err := f.pool.Exec(t.Context(), `UPDATE `+s+`.runs SET status = 'completed', output = '"exported"', finished_at = now() WHERE id = $1`, id)
		if err == nil {
			_, err = f.pool.Exec(t.Context(), `SELECT pg_notify($1, $2)`, s+"_done", id.String())
		}
		ended <- err
	}()
	r := tenure(t, s, "runs", "result", id.String(), "--follow", "--timeout", "1m")
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || r.stdout != `"exported"`+"\n" {
		t.Fatalf("runs result --follow of a run that ends in 1.5 s\n%s", r)
	}
	waited := toast() - before

	expect(t, tenure(t, s, "runs", "result", id.String()), 0, `"exported"`)
	once := toast() - before - waited
	if once == 0 {
		t.Fatal("reading the run read no TOAST block: the input is not large enough to test with")
	}
	if waited > 2*once {
		t.Fatalf("waiting 1.5 s read %d TOAST blocks of runs, reading the ended run once %d: the wait reads the payloads at every poll", waited, once)
	}
	t.Logf("TOAST blocks: %d for the wait, %d for one read", waited, once)
}
