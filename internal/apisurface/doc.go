// Package apisurface holds the test that pins the public API of the core
// module: every exported name of every public package (each package outside
// internal/ that is not a command and not in a nested module), and every
// exported field of its struct types with its type, listed in
// testdata/api.txt. A name added or removed by accident fails the test; one
// added on purpose is added to the list in the same change, where a reviewer
// sees it. The test also requires a doc comment on every exported name, and
// keeps the types of internal packages out of exported signatures, fields
// and aliases: a public package aliases no internal type (the records are
// package record's, which internal/store aliases instead).
package apisurface
