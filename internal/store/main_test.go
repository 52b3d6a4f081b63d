package store_test

import (
	"os"
	"testing"

	"github.com/tenurehq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
