// Package shape holds the tests that keep the code of the repository in
// shape, whatever package it is in: no function of a library (any package
// but main, in any module of the repository) is longer than 80 lines, from
// its func keyword to its closing brace, so that each reads on one screen
// and says by its name what it does. A function that grows past that is
// split in the same change, not listed as an exception.
package shape
