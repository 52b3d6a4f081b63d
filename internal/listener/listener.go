// Package listener keeps a LISTEN connection for a worker (new runs) or a
// client (finished runs). It is the one implementation of what such a
// connection must survive:
//
//   - the database being unreachable: it reconnects with exponential backoff
//     (Retry doubling up to MaxRetry, with jitter so that a fleet does not
//     reconnect in step), reset once LISTEN succeeds again; the loss is
//     logged once per distinct error (again every RepeatWarning while it
//     persists), not at every try, and one line says when notices work again;
//   - a connection pooler in transaction mode between it and PostgreSQL: the
//     pooler accepts LISTEN but hands the server connection to other clients
//     at once, so notices never arrive. After its first LISTEN the listener
//     sends a probe notice through the pool, the way real notices are sent,
//     and if the probe does not come back within ProbeTimeout it logs one
//     warning naming the cause and the fix, and Run returns ErrNotDelivered:
//     its owner then relies on polling alone.
//
// Meanwhile the owner polls: a lost notice delays work by at most its poll
// interval, never loses it.
package listener

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotDelivered is returned by Run when a notice sent through the pool did
// not reach the LISTEN connection: it goes through a transaction pooler (or
// to another database than the pool).
var ErrNotDelivered = errors.New("notices sent through the pool do not reach the LISTEN connection")

// probePrefix starts the payload of probe notices, which Notify never sees.
const probePrefix = "tenure-probe:"

// Config configures Run. Zero durations take the defaults their comments name.
type Config struct {
	// Channel is the channel to LISTEN on, unquoted.
	Channel string
	// Connect opens the LISTEN connection; Run closes it.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Send sends a notice on a channel through the pool, as the notices
	// listened for are sent (store.Store.Notify): the probe.
	Send func(ctx context.Context, channel, payload string) error
	// Listening is called each time LISTEN has taken effect: notices sent
	// before it were missed.
	Listening func()
	// Delivering is called after Listening once notices are known to
	// arrive: after the probe passed (on the first connection; a later one
	// is the same setup) and before any notice is delivered.
	Delivering func()
	// Lost is called when a connection that was listening fails, before
	// the wait to reconnect: notices sent from now until the next
	// Listening are missed.
	Lost func()
	// Notify is called with the payload of each notice, probes excepted.
	Notify func(payload string)
	// Dropped, when set, returns a channel closed when the connection is to
	// be opened anew (store.Store.Dropped: the server answered that it no
	// longer takes writes, a standby or shutting down): a LISTEN on a
	// server that a failover left behind hears none of the new primary's
	// notices, and would never fail.
	Dropped func() <-chan struct{}
	// Retry is the first delay before reconnecting, doubled after each
	// failed try up to MaxRetry. Defaults 1s and 30s.
	Retry, MaxRetry time.Duration
	// RepeatWarning is how long a persisting error stays unrepeated in the
	// log. Default 30s, like the worker's other repeating errors.
	RepeatWarning time.Duration
	// ProbeTimeout is how long the probe notice may take to arrive. Default 5s.
	ProbeTimeout time.Duration
	// Timeout bounds connecting, LISTEN and sending the probe, each; not the
	// wait for notices. Default: none.
	Timeout time.Duration
	// Logger receives the warnings and the recovery line.
	Logger *slog.Logger
	// What names the notices in the log, e.g. "run notifications".
	What string
	// Meanwhile says what the owner does without notices, e.g. "polling
	// every 1s".
	Meanwhile string
	// Fix says how to give the owner a connection that receives notices, or
	// how to turn listening off, for the warning about a pooler.
	Fix string
	// Attrs are logged with every line (e.g. "worker", label).
	Attrs []any
}

func (c Config) withDefaults() Config {
	if c.Retry <= 0 {
		c.Retry = time.Second
	}
	if c.MaxRetry <= 0 {
		c.MaxRetry = 30 * time.Second
	}
	c.MaxRetry = max(c.MaxRetry, c.Retry)
	if c.RepeatWarning <= 0 {
		c.RepeatWarning = 30 * time.Second
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Listening == nil {
		c.Listening = func() {}
	}
	if c.Delivering == nil {
		c.Delivering = func() {}
	}
	if c.Lost == nil {
		c.Lost = func() {}
	}
	if c.Notify == nil {
		c.Notify = func(string) {}
	}
	return c
}

// Run listens until ctx ends, then returns nil; or, when the probe finds
// that notices do not arrive, logs that once and returns ErrNotDelivered.
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	l := &loop{cfg: cfg, delay: cfg.Retry, probe: true}
	for ctx.Err() == nil {
		l.dropped = false
		err := l.once(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrNotDelivered) {
			return err
		}
		if l.dropped {
			err = errDropped
		}
		cfg.Lost()
		l.lost(err)
		t := time.NewTimer(l.jittered())
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		l.delay = min(2*l.delay, cfg.MaxRetry)
	}
	return nil
}

// loop is the state of one Run.
type loop struct {
	cfg   Config
	delay time.Duration // before the next reconnection
	probe bool          // the probe has yet to pass

	down     time.Time // when notices were lost; zero while they work
	warned   string    // the error last logged during this outage
	warnedAt time.Time
	dropped  bool // the last connection was dropped by the owner
}

// errDropped ends a connection that the owner dropped (Config.Dropped).
var errDropped = errors.New("the database server no longer takes writes (a failover?): listening anew")

// once connects, listens and delivers notices until the connection fails,
// or the owner drops it.
func (l *loop) once(ctx context.Context) error {
	if l.cfg.Dropped != nil {
		drop := l.cfg.Dropped()
		var stop context.CancelCauseFunc
		ctx, stop = context.WithCancelCause(ctx)
		defer stop(nil)
		go func() {
			select {
			case <-drop:
				stop(errDropped)
			case <-ctx.Done():
			}
		}()
		defer func() {
			if context.Cause(ctx) == errDropped {
				l.dropped = true
			}
		}()
	}
	sctx, cancel := l.bounded(ctx)
	defer cancel()
	conn, err := l.cfg.Connect(sctx)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(sctx, "LISTEN "+pgx.Identifier{l.cfg.Channel}.Sanitize()); err != nil {
		return err
	}
	cancel()
	l.delay = l.cfg.Retry
	l.cfg.Listening()
	if l.probe {
		if err := l.check(ctx, conn); err != nil {
			return err
		}
		l.probe = false
	}
	l.cfg.Delivering()
	if !l.down.IsZero() {
		l.cfg.Logger.Info("tenure: "+l.cfg.What+" work again", append(l.attrs(), "lost_for", time.Since(l.down).Round(time.Millisecond))...)
		l.down, l.warned = time.Time{}, ""
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(n.Payload, probePrefix) {
			l.cfg.Notify(n.Payload)
		}
	}
}

// check sends a probe notice through the pool and waits for it on conn,
// delivering the notices that arrive meanwhile.
func (l *loop) check(ctx context.Context, conn *pgx.Conn) error {
	payload := fmt.Sprintf("%s%016x", probePrefix, rand.Uint64())
	sctx, cancel := l.bounded(ctx)
	err := l.cfg.Send(sctx, l.cfg.Channel, payload)
	cancel()
	if err != nil {
		return fmt.Errorf("send a probe notice through the pool: %w", err)
	}
	wait, cancel := context.WithTimeout(ctx, l.cfg.ProbeTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wait)
		switch {
		case err != nil && ctx.Err() == nil && wait.Err() != nil:
			l.cfg.Logger.Warn(fmt.Sprintf("tenure: %s do not arrive: a notice sent through the pool did not reach "+
				"the LISTEN connection within %s, which is what a connection pooler in transaction mode does "+
				"(pgbouncer pool_mode=transaction and most hosted poolers); %s from now on. %s",
				l.cfg.What, l.cfg.ProbeTimeout, l.cfg.Meanwhile, l.cfg.Fix), l.attrs()...)
			return ErrNotDelivered
		case err != nil:
			return err
		case n.Payload == payload:
			return nil
		case !strings.HasPrefix(n.Payload, probePrefix):
			l.cfg.Notify(n.Payload)
		}
	}
}

// lost logs a failed connection: once per distinct error per outage, again
// when an error has persisted for RepeatWarning.
func (l *loop) lost(err error) {
	now := time.Now()
	if l.down.IsZero() {
		l.down = now
	}
	msg := err.Error()
	if msg == l.warned && now.Sub(l.warnedAt) < l.cfg.RepeatWarning {
		return
	}
	l.warned, l.warnedAt = msg, now
	l.cfg.Logger.Warn("tenure: "+l.cfg.What+" lost, "+l.cfg.Meanwhile+" until reconnected",
		append(l.attrs(), "error", err, "retry_in", l.delay.Round(time.Millisecond), "lost_for", now.Sub(l.down).Round(time.Millisecond))...)
}

// bounded is ctx with the Timeout of one step of connecting, if any.
func (l *loop) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.cfg.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, l.cfg.Timeout)
}

// jittered is the delay before the next try, between half and all of it.
func (l *loop) jittered() time.Duration {
	half := l.delay / 2
	return half + rand.N(l.delay-half+1)
}

func (l *loop) attrs() []any { return append([]any(nil), l.cfg.Attrs...) }
