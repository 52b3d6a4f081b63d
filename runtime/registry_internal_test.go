package runtime

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Only the server's refusal of the registry's row turns the registry off;
// an outage of the statement (a timeout, a shutdown, a lost connection)
// does not.
func TestRegistryRefused_OnlyForTheRowsOwnFaults(t *testing.T) {
	for code, want := range map[string]bool{
		"42501": true, "42P01": true, "42703": true, "23514": true, "22001": true,
		"57014": false, "57P01": false, "08006": false, "40001": false, "53300": false,
	} {
		if got := registryRefused(&pgconn.PgError{Code: code}); got != want {
			t.Errorf("SQLSTATE %s: refused %v, want %v", code, got, want)
		}
	}
	for _, err := range []error{nil, context.DeadlineExceeded, errors.New("connection reset")} {
		if registryRefused(err) {
			t.Errorf("%v counted as a refusal", err)
		}
	}
}
