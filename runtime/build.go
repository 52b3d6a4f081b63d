package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"runtime/debug"
	"sync"
)

// DefaultBuildID is Config.BuildID's default: the VCS revision the binary
// was built from, its first 12 characters ("+dirty" appended when the
// working tree was modified), from the binary's build information; without
// one (a binary built outside a repository, or with -buildvcs=false),
// "sha256:" and the first 12 hex digits of the hash of the binary itself;
// "unknown" when neither can be read. Computed once per process.
func DefaultBuildID() string {
	defaultBuild.once.Do(func() { defaultBuild.id = buildID(debug.ReadBuildInfo) })
	return defaultBuild.id
}

var defaultBuild struct {
	once sync.Once
	id   string
}

// buildID is DefaultBuildID, reading the build information with read.
func buildID(read func() (*debug.BuildInfo, bool)) string {
	if info, ok := read(); ok {
		var rev, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if modified == "true" {
				rev += "+dirty"
			}
			return rev
		}
	}
	if h, err := binaryHash(); err == nil {
		return "sha256:" + h[:12]
	}
	return "unknown"
}

// binaryHash is the hex SHA-256 of the running executable.
func binaryHash() (string, error) {
	path, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
