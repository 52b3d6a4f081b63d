package record

import (
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/flow"
)

// Downstream is a downstream of flow control as it stands: the limits in
// force, what its code declared, what is in use and waiting now, its
// breaker and its counters (a row of the view downstream_status). The
// counters count from the downstream's first call and are never reset.
type Downstream struct {
	// Name is the downstream's name (flow.New's).
	Name string `json:"name"`
	// Limits are the limits in force: as declared, or as a person set them
	// when OverriddenAt is set.
	Limits flow.Limits `json:"limits"`
	// OverriddenAt and OverriddenBy are when and by which database role a
	// person last changed the limits (SQL set_downstream, or an UPDATE);
	// nil and empty while the declaration applies. While overridden,
	// declarations are recorded (Declared) but not applied, until a reset.
	OverriddenAt *time.Time `json:"overridden_at"`
	OverriddenBy string     `json:"overridden_by,omitempty"`
	// Declared is what code declared last, by the worker DeclaredBy, at
	// DeclaredAt; nil, empty and nil when no worker declared it.
	Declared   *flow.Limits `json:"declared"`
	DeclaredBy string       `json:"declared_by,omitempty"`
	DeclaredAt *time.Time   `json:"declared_at"`

	// InUse counts the concurrency slots held now, by runs whose lease is
	// live, over all keys.
	InUse int64 `json:"in_use"`
	// Waiting counts the steps waiting on the downstream's limits now
	// (runs not yet ended).
	Waiting int64 `json:"waiting"`
	// Keys counts the keys the downstream was called with.
	Keys int64 `json:"keys"`

	// Breaker is the breaker's state: flow.BreakerClosed, BreakerOpen or
	// BreakerHalfOpen.
	Breaker string `json:"breaker"`
	// BreakerSince is when it entered that state; nil before the
	// downstream's first call.
	BreakerSince *time.Time `json:"breaker_since"`
	// BreakerManual is set while the breaker is open by hand: it stays open
	// until it is closed by hand.
	BreakerManual bool `json:"breaker_manual"`
	// OpenUntil is when an open breaker lets its next probe through; nil
	// when it is not open or was opened by hand.
	OpenUntil *time.Time `json:"open_until"`
	// ProbeRun is the run whose attempt probes a half-open breaker;
	// uuid.Nil for none.
	ProbeRun uuid.UUID `json:"probe_run"`
	// WindowCalls and WindowErrors are the calls that ended, and those in
	// an error, in the breaker's current window.
	WindowCalls  int64 `json:"window_calls"`
	WindowErrors int64 `json:"window_errors"`
	// RetryTokens is the retry budget's balance (retries it allows now) at
	// its last use; nil before one.
	RetryTokens *float64 `json:"retry_tokens"`

	// Admitted counts the attempts admitted, Retries those of them that
	// followed an error.
	Admitted int64 `json:"admitted"`
	Retries  int64 `json:"retries"`
	// DeniedConcurrency, DeniedRate, DeniedBreaker and DeniedRetryBudget
	// count the denials, by cause.
	DeniedConcurrency int64 `json:"denied_concurrency"`
	DeniedRate        int64 `json:"denied_rate"`
	DeniedBreaker     int64 `json:"denied_breaker"`
	DeniedRetryBudget int64 `json:"denied_retry_budget"`
	// Calls counts the calls that ended as a success or an error, Errors
	// those in an error (what the breaker counts).
	Calls  int64 `json:"calls"`
	Errors int64 `json:"errors"`
}

// Overridden reports whether a person changed the limits: declarations no
// longer apply until they are reset.
func (d Downstream) Overridden() bool { return d.OverriddenAt != nil }

// Denied counts the denials of every cause.
func (d Downstream) Denied() int64 {
	return d.DeniedConcurrency + d.DeniedRate + d.DeniedBreaker + d.DeniedRetryBudget
}

// BreakerChange is one change of a downstream's breaker state (a row of the
// view breaker_history, itself audit_log rows of action 'breaker').
type BreakerChange struct {
	// ID is the audit_log row's ID, increasing.
	ID int64 `json:"id"`
	// At is when the breaker changed.
	At time.Time `json:"at"`
	// Downstream is the downstream's name.
	Downstream string `json:"downstream"`
	// From and To are the states before and after (flow.Breaker*); From
	// is empty when it was not recorded.
	From string `json:"from"`
	To   string `json:"to"`
	// Why is what moved it: the errors counted, a probe's outcome, or the
	// note of a person who opened or closed it by hand.
	Why string `json:"why"`
	// By is who moved it: "person", or the label of the worker whose
	// commit did; Actor is the database role of the session.
	By    string `json:"by"`
	Actor string `json:"actor"`
}
