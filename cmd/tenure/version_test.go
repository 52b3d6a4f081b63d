package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/sdk"
	"github.com/tenurehq/tenure/store"
)

func TestCLI_VersionNeedsNoDatabase(t *testing.T) {
	version := func(args ...string) string {
		cmd := exec.CommandContext(t.Context(), bin, append([]string{"version"}, args...)...)
		cmd.Env = withoutDatabaseURL(os.Environ())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tenure version %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	want := fmt.Sprintf("tenure %s (schema version %d, ", sdk.Version, store.LatestVersion())
	if got := version(); !strings.HasPrefix(got, want) {
		t.Fatalf("tenure version printed %q, want it to begin with %q", got, want)
	}
	var v struct {
		Version       string `json:"version"`
		SchemaVersion int    `json:"schema_version"`
	}
	if err := json.Unmarshal([]byte(version("--json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Version != sdk.Version || v.SchemaVersion != store.LatestVersion() {
		t.Fatalf("tenure version --json = %+v, want %s and schema version %d", v, sdk.Version, store.LatestVersion())
	}
}
