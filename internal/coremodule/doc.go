// Package coremodule holds the test that keeps the core module lean. Every
// module that github.com/tenurehq/tenure's go.mod requires is in the module
// graph (go list -m all) of every program that imports a Tenure package, so
// the test lists each requirement with the reason it is there, and a new one
// fails until someone puts the code that needs it in a module of its own (as
// cmd/tenure, examples/workflows/tracing, examples/river and bench are) or
// adds it to the list with a reason.
package coremodule
