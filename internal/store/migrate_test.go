package store_test

import (
	"testing"

	"github.com/tenurehq/tenure/internal/store"
)

func TestMigrations_AreNumberedWithoutGaps(t *testing.T) {
	for i, m := range store.Migrations() {
		if m.Version != i+1 {
			t.Fatalf("migration %d is numbered %d: numbers must run 1, 2, 3 …", i, m.Version)
		}
		if m.Name == "" || m.SQL == "" {
			t.Fatalf("migration %d has no name or no SQL", m.Version)
		}
	}
}

func TestValidateSchema(t *testing.T) {
	for _, name := range []string{"tenure", "t_0a", "_x"} {
		if err := store.ValidateSchema(name); err != nil {
			t.Errorf("%q rejected: %v", name, err)
		}
	}
	for _, name := range []string{"", "Tenure", "a-b", `x"; DROP TABLE y; --`, "1abc"} {
		if err := store.ValidateSchema(name); err == nil {
			t.Errorf("%q accepted", name)
		}
	}
}
