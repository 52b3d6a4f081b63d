//go:build !(linux && amd64)

package main

import (
	"fmt"
	goruntime "runtime"
	"time"
)

// skewClock would move the process's wall clock (see clockskew_linux_amd64.go);
// the patch of time.Now it needs is written for linux/amd64 only.
func skewClock(skew time.Duration) error {
	if skew == 0 {
		return nil
	}
	return fmt.Errorf("-clock-skew %s: a skewed clock is implemented on linux/amd64 only, not %s/%s", skew, goruntime.GOOS, goruntime.GOARCH)
}
