// Package noleaks is the TestMain of Tenure's packages whose tests must
// leave no goroutine behind: pgtest.Main, then go.uber.org/goleak. It is a
// package of its own so that goleak, a test-only requirement of the core
// module, is compiled into no public package (tenuretest imports pgtest).
package noleaks

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/internal/pgtest"
)

// Main runs the tests with pgtest.Main (which stops a private cluster at the
// end), then fails the process if they passed but left goroutines behind.
// Use it as TestMain: func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }
func Main(m *testing.M) int {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	return code
}
