package runtime

import (
	"runtime/debug"
	"strings"
	"testing"
)

// The default build ID is the VCS revision, shortened, marked when the
// tree was modified; without one, a hash of the binary.
func TestBuildID_TheRevisionElseTheBinarysHash(t *testing.T) {
	t.Parallel()
	info := func(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Settings: settings}, true }
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}
	for _, c := range []struct {
		read func() (*debug.BuildInfo, bool)
		want string
	}{
		{info(rev), "0123456789ab"},
		{info(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "0123456789ab+dirty"},
		{info(debug.BuildSetting{Key: "vcs.revision", Value: "abc"}), "abc"},
	} {
		if got := buildID(c.read); got != c.want {
			t.Errorf("buildID = %q, want %q", got, c.want)
		}
	}
	for _, read := range []func() (*debug.BuildInfo, bool){info(), func() (*debug.BuildInfo, bool) { return nil, false }} {
		got := buildID(read)
		if !strings.HasPrefix(got, "sha256:") || len(got) != len("sha256:")+12 {
			t.Errorf("buildID without a revision = %q, want sha256: and 12 hex digits", got)
		}
	}
	if a, b := DefaultBuildID(), DefaultBuildID(); a == "" || a != b {
		t.Errorf("DefaultBuildID = %q then %q, want one non-empty ID", a, b)
	}
}
