package browser_test

import (
	"os"
	"testing"

	"github.com/tenurehq/tenure/internal/noleaks"
)

// The browser, the server and the worker all have owners that wait for them:
// no goroutine may outlive the tests.
func TestMain(m *testing.M) { os.Exit(noleaks.Main(m)) }
