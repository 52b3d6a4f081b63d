package store_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/internal/pgtest"
	"github.com/tenurehq/tenure/internal/store"
)

// TestDocs_ASynchronousStandbyAsOperationsSetsItUp runs the SQL of
// docs/operations.md, "A synchronous standby", on a primary with an
// asynchronous standby: Tenure's role's commits become synchronous, and
// with the second block only theirs.
func TestDocs_ASynchronousStandbyAsOperationsSetsItUp(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile("(?s)\n## A synchronous standby\n(.*?)\n## ").FindSubmatch(doc)
	if section == nil {
		t.Fatal(`no "A synchronous standby" section in docs/operations.md`)
	}
	blocks := regexp.MustCompile("(?s)```(sql|text)\n(.*?)```").FindAllSubmatch(section[1], -1)
	if len(blocks) != 3 {
		t.Fatalf("%d blocks in the section, want the two sql blocks and the connection string", len(blocks))
	}
	// The connection string follows a promotion.
	cfg, err := pgxpool.ParseConfig(strings.TrimSpace(string(blocks[2][2])))
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]bool{cfg.ConnConfig.Host: true}
	for _, f := range cfg.ConnConfig.Fallbacks {
		hosts[f.Host] = true
	}
	if len(hosts) != 2 || cfg.ConnConfig.ValidateConnect == nil {
		t.Fatalf("the documented connection string names hosts %v; want two, and target_session_attrs", hosts)
	}

	rep := pgtest.Replicate(t, false)
	owner := storeOn(t, rep.PrimaryURL())
	run := func(block []byte) {
		t.Helper()
		// The pair's standby is named standby; ALTER SYSTEM runs outside a
		// transaction, so each statement on its own.
		sql := strings.ReplaceAll(string(block), "standby_a", "standby")
		for _, stmt := range strings.Split(sql, ";") {
			if strings.TrimSpace(regexp.MustCompile(`(?m)--.*$`).ReplaceAllString(stmt, "")) == "" {
				continue
			}
			if _, err := owner.Pool().Exec(t.Context(), stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
	}
	mode := func(user string) store.ReplicationMode {
		t.Helper()
		conn, err := pgx.Connect(t.Context(), strings.Replace(rep.PrimaryURL(), "postgres://postgres@", "postgres://"+user+"@", 1))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		r, err := owner.ReadReplication(t.Context(), conn)
		if err != nil {
			t.Fatal(err)
		}
		return r.Mode
	}
	if _, err := owner.Pool().Exec(t.Context(), `CREATE ROLE tenure_worker LOGIN; GRANT USAGE ON SCHEMA tenure TO tenure_worker`); err != nil {
		t.Fatal(err)
	}
	if m := mode("tenure_worker"); m != store.ReplicationAsynchronous {
		t.Fatalf("before: %s, want asynchronous", m)
	}
	run(blocks[0][2])
	if m := mode("tenure_worker"); m != store.ReplicationSynchronous {
		t.Fatalf("after the first block: %s, want synchronous", m)
	}
	run(blocks[1][2])
	if w, o := mode("tenure_worker"), mode("postgres"); w != store.ReplicationSynchronous || o != store.ReplicationAsynchronous {
		t.Fatalf("after the second block: Tenure's role %s, another %s; want synchronous for Tenure's alone", w, o)
	}
}
