package policy_test

import (
	"errors"
	"fmt"
	"time"
)

// errTransient is an ordinary error that policies retry.
var errTransient = errors.New("connection reset")

// errNotFound is an error that tests classify with rules.
var errNotFound = errors.New("not found")

// RateLimitError is an error type that tests and examples match with OnType.
type RateLimitError struct {
	Wait time.Duration
}

func (e *RateLimitError) Error() string { return fmt.Sprintf("rate limited, retry in %s", e.Wait) }

// RetryAfter makes *RateLimitError a policy.RetryAfterer.
func (e *RateLimitError) RetryAfter() time.Duration { return e.Wait }
