package policy

import (
	"encoding/binary"
	"hash/fnv"
)

// Seed returns the jitter seed for an attempt: the 64-bit FNV-1a hash of the
// run ID followed by the step and attempt numbers as big-endian 64-bit
// integers. It is stable across processes and releases, so a delay recorded
// with its seed can be reproduced and explained later.
func Seed(runID string, step, attempt int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(runID))
	var buf [16]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(step))
	binary.BigEndian.PutUint64(buf[8:], uint64(attempt))
	h.Write(buf[:])
	return h.Sum64()
}
