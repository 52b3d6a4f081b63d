//go:build !unix

package pgtest

import "os"

// fileOwner names the owner of a file, or "" when unknown.
func fileOwner(os.FileInfo) string { return "" }
