//go:build linux && amd64

package main

// Why this file exists: the schedules' promise that a worker whose clock is
// off (by an hour, say) decides no extra tick and misses none needs a worker
// process whose wall clock really is off. Neither usual tool reaches a Go
// program on Linux: libfaketime hooks the C library, which a Go binary does
// not call for the time (the runtime reads the vDSO itself), and a time
// namespace shifts CLOCK_MONOTONIC and CLOCK_BOOTTIME, never CLOCK_REALTIME.
// So, with -clock-skew, the worker rewrites the first instructions of
// time.Now in its own memory into a jump to skewedNow: every wall-clock read
// of the process (Tenure's runtime, pgx, log/slog, and time.Since, Until and
// context deadlines, which call time.Now for times without a monotonic
// reading) goes through it. It is the technique of github.com/bouk/monkey,
// written out here rather than depended on, for amd64 only.
//
// skewedNow reads the real time from the kernel (gettimeofday, through the
// vDSO; never time.Now, which now jumps to it) and adds the skew. Its Time
// has no monotonic reading, so that durations between two of its times stay
// consistent within the process; timers and sleeps run on the monotonic
// clock and are unaffected, as on a machine whose wall clock is off. time.Now
// is not inlined anywhere (`go build -gcflags='time=-m=2'`: "cannot inline
// Now: function too complex"), so each of its callers calls its entry.

import (
	"fmt"
	"reflect"
	"syscall"
	"time"
	"unsafe"
)

// clockSkew is what skewedNow adds to the real time; set before the patch.
var clockSkew time.Duration

// skewedNow replaces time.Now in a worker started with -clock-skew.
func skewedNow() time.Time {
	var tv syscall.Timeval
	if err := syscall.Gettimeofday(&tv); err != nil {
		panic("worker: gettimeofday: " + err.Error())
	}
	return time.Unix(tv.Sec, tv.Usec*1000).Add(clockSkew)
}

// skewClock makes every time.Now of the process return the real time plus
// skew (nothing when skew is 0). It must run before the process starts
// goroutines of its own: the patch is written while nothing calls time.Now.
func skewClock(skew time.Duration) error {
	if skew == 0 {
		return nil
	}
	clockSkew = skew

	// MOVABS RDX, <the func value of skewedNow>; JMP [RDX]: a jump to the
	// code the func value points to, with the func value in RDX, the
	// closure context register of Go's internal ABI, as a call through it
	// would have.
	replacement := skewedNow
	funcval := *(*uintptr)(unsafe.Pointer(&replacement))
	code := []byte{0x48, 0xBA, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0x22}
	for i := range 8 {
		code[2+i] = byte(funcval >> (8 * i))
	}

	entry := reflect.ValueOf(time.Now).UnsafePointer()
	page := uintptr(syscall.Getpagesize())
	off := uintptr(entry) % page
	pages := unsafe.Slice((*byte)(unsafe.Add(entry, -int(off))), (off+uintptr(len(code))+page-1)/page*page)
	if err := syscall.Mprotect(pages, syscall.PROT_READ|syscall.PROT_WRITE|syscall.PROT_EXEC); err != nil {
		return fmt.Errorf("clock skew: make time.Now writable: %w", err)
	}
	copy(unsafe.Slice((*byte)(entry), len(code)), code)
	if err := syscall.Mprotect(pages, syscall.PROT_READ|syscall.PROT_EXEC); err != nil {
		return fmt.Errorf("clock skew: protect time.Now again: %w", err)
	}

	// The patch took: time.Now (here through time.Since) is off the
	// kernel's clock by the skew.
	var tv syscall.Timeval
	if err := syscall.Gettimeofday(&tv); err != nil {
		return fmt.Errorf("clock skew: gettimeofday: %w", err)
	}
	if d := time.Since(time.Unix(tv.Sec, tv.Usec*1000)) - skew; d < -time.Second || d > time.Second {
		return fmt.Errorf("clock skew: time.Now is off by %s after the patch, not %s", d+skew, skew)
	}
	return nil
}
