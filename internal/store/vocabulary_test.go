package store_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
)

// strs turns a typed vocabulary into its strings.
func strs[S ~string](vs []S) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// The Go vocabulary of statuses and reasons is exactly what the migrated
// schema's CHECK constraints allow: a value added on one side only fails here.
func TestVocabulary_MatchesTheCheckConstraints(t *testing.T) {
	st := newStore(t)
	for _, tc := range []struct {
		table, column string
		want          []string
	}{
		{"runs", "status", strs(store.RunStatuses())},
		{"steps", "status", strs(store.StepStatuses())},
		{"steps", "kind", strs(store.StepKinds())},
		{"attempts", "status", strs(store.AttemptStatuses())},
		{"attempts", "delay_source", strs(policy.Sources())},
		{"failures", "reason", strs(policy.Reasons())},
	} {
		t.Run(tc.table+"."+tc.column, func(t *testing.T) {
			got := allowed(t, st, tc.table, tc.column)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("CHECK on %s.%s allows %v; the Go vocabulary lists %v", tc.table, tc.column, got, tc.want)
			}
		})
	}
}

// quoted matches each value in the constraint PostgreSQL makes of `column IN ('a', 'b')`:
// CHECK ((column = ANY (ARRAY['a'::text, 'b'::text]))).
var quoted = regexp.MustCompile(`'([^']*)'::text`)

// allowed returns the values a CHECK constraint of the migrated schema allows
// in table.column, in the constraint's order, read back from pg_constraint.
func allowed(t *testing.T, st *store.Store, table, column string) []string {
	t.Helper()
	rows, err := st.Pool().Query(t.Context(), `
		SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
		WHERE c.contype = 'c' AND c.conrelid = $1::regclass`,
		pgx.Identifier{st.Schema(), table}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("(%s = ANY (ARRAY[", column)
	var lists []string
	for _, d := range defs {
		if strings.Contains(d, prefix) {
			lists = append(lists, d)
		}
	}
	if len(lists) != 1 {
		t.Fatalf("%s.%s: want one CHECK listing its values, found %q among %q", table, column, lists, defs)
	}
	var out []string
	for _, m := range quoted.FindAllStringSubmatch(lists[0], -1) {
		out = append(out, m[1])
	}
	return out
}
