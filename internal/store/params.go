package store

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// Parameters go in types that every query execution mode of pgx encodes.
// Through a transaction pooler the pool may run in exec or simple_protocol
// mode (docs/operations.md, "Connection poolers"), where pgx does not ask
// the server for a parameter's type and picks it from the Go type alone:
// []byte is then bytea, which a jsonb parameter refuses, and [16]byte has
// no text form at all. JSON therefore goes as a string and a UUID as a
// pgtype.UUID: both encode as text there, and in the binary protocol of the
// default mode as before (a string costs one copy of the JSON, about 0.1µs
// a value; pgtype.Text would cost three times that, through driver.Valuer).

type (
	// jsonParam is a JSON value as a parameter (see jsonArg).
	jsonParam = string
	// uuidParam is a UUID as a parameter (see uuidArg).
	uuidParam = pgtype.UUID
)

// jsonArg is a JSON value as a parameter. A nil value is no JSON: like any
// invalid JSON, PostgreSQL refuses it.
func jsonArg(b []byte) jsonParam { return string(b) }

// uuidArg is a UUID as a parameter.
func uuidArg(id uuid.UUID) uuidParam { return uuidParam{Bytes: id, Valid: true} }
