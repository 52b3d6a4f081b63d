// Package apisurface holds the test that pins the public API of the core
// module: every exported name of every public package (each package outside
// internal/ that is not a command and not in a nested module), listed in
// testdata/api.txt. A name added or removed by accident fails the test; one
// added on purpose is added to the list in the same change, where a reviewer
// sees it. The test also requires a doc comment on every exported name, and
// keeps the types of internal packages out of exported signatures and
// fields, except as the deliberate alias declarations (type T = internal.T)
// of package store and operator and the vocabulary of package sdk.
package apisurface
