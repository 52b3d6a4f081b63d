package main

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/record"
	"github.com/tenurehq/tenure/sdk"
)

// tenure runs export writes one history a line, by ID or as runs list
// selects, and refuses IDs and filters together.
func TestCLI_RunsExportWritesHistories(t *testing.T) {
	bankUp.Store(true)
	e := newEnv(t, refundOrder)
	s := e.schema
	var ids []string
	for i := range 3 {
		r, err := sdk.Start(t.Context(), e.client, refundOrder, order{ID: 90 + i})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wait(t, r); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID.String())
	}
	read := func(out string) []record.History {
		t.Helper()
		var hs []record.History
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var h record.History
			if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
				t.Fatalf("a line of runs export: %v: %s", err, sc.Text())
			}
			hs = append(hs, h)
		}
		return hs
	}
	got := tenure(t, s, "runs", "export", ids[0])
	hs := read(got.stdout)
	if got.code != 0 || len(hs) != 1 || hs[0].RunID.String() != ids[0] || hs[0].Format != record.HistoryFormat ||
		hs[0].Workflow != "refund-order" || len(hs[0].Steps) != 1 || hs[0].Steps[0].Name != "refund" || hs[0].Steps[0].InputHash == "" {
		t.Fatalf("runs export %s: %+v\n%s", ids[0], hs, got)
	}
	if hs := read(tenure(t, s, "runs", "export", "--workflow", "refund-order", "--limit", "2").stdout); len(hs) != 2 {
		t.Fatalf("runs export --workflow --limit 2: %d histories", len(hs))
	}
	expect(t, tenure(t, s, "runs", "export", ids[0], "--workflow", "refund-order"), 2, "give run IDs or filters, not both")
}
