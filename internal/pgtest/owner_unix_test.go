//go:build unix

package pgtest

import (
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// fileOwner names the owner of a file, or "" when unknown.
func fileOwner(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10))
	if err != nil {
		return ""
	}
	return u.Username
}
