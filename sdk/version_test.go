package sdk_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/tenurehq/tenure/sdk"
)

// The constant and the changelog name the same release, so that a release
// cannot bump one and forget the other.
func TestVersion_IsTheChangelogsLatestRelease(t *testing.T) {
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(sdk.Version) {
		t.Fatalf("sdk.Version %q is not a semantic version tag", sdk.Version)
	}
	log, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`).FindSubmatch(log)
	if m == nil {
		t.Fatal("CHANGELOG.md has no release heading such as ## [0.1.0] - 2026-12-01")
	}
	if want := "v" + string(m[1]); sdk.Version != want {
		t.Fatalf("sdk.Version is %s, CHANGELOG.md's latest release is %s", sdk.Version, want)
	}
}
