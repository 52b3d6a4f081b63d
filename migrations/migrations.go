// Package migrations holds Tenure's schema as numbered SQL files, embedded in
// the binary so that a worker, a client and the CLI all carry the schema they
// were built against.
//
// Files are named NNNN_name.sql and applied in order by store.Migrate. Each
// file refers to the target schema as {schema}; the runner replaces it with
// the quoted, validated schema name. A file, once released, never changes: a
// change to the schema is a new file.
package migrations

import "embed"

// FS holds the migration files, named NNNN_name.sql.
//
//go:embed *.sql
var FS embed.FS
