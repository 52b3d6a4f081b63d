package runtime

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/store"

	// The package's name is this file's type's.
	pglisten "github.com/tenurehq/tenure/internal/listener"
)

// listener is the worker's LISTEN on the runs channel: it wakes the claimer
// when a run is announced or a wake is due, and cancels a held run at its
// Cancel's notice.
type listener struct {
	cfg     *Config
	store   *store.Store
	connect func(context.Context) (*pgx.Conn, error) // Worker.connect
	claims  *claimer
	pool    *runPool
	loop    loop // run's goroutine, between start and stop
	// backfills wakes the schedules' ticker at a backfill_schedule's
	// notice ("backfill"), so that the request is carried out at once, not
	// at the ticker's next check (at most a second later).
	backfills chan struct{}
}

// start listens in a goroutine of its own (run) until stop, or until ctx
// ends.
func (l *listener) start(ctx context.Context) {
	l.loop = startLoop(ctx, l.run)
}

// stop ends the LISTEN and waits for its connection to close.
func (l *listener) stop() { l.loop.stop() }

// run listens until ctx ends. It reconnects while the database is
// unreachable and stops for good when its notices do not arrive (a
// transaction pooler, see package listener), or does not listen at all with
// PollOnly: the claim loop's poll finds every run anyway, only later.
func (l *listener) run(ctx context.Context) {
	if l.cfg.PollOnly {
		return
	}
	defer l.lost() // stopped: at shutdown, or for good when notices do not arrive
	_ = pglisten.Run(ctx, pglisten.Config{
		Channel: l.store.RunsChannel(),
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			if l.cfg.ListenConfig != nil {
				return pgx.ConnectConfig(ctx, l.cfg.ListenConfig.Copy())
			}
			return l.connect(ctx)
		},
		Send:       l.store.Notify,
		Dropped:    l.store.Dropped,
		Listening:  l.listening,
		Delivering: l.delivering,
		Lost:       l.lost,
		Notify:     l.notified,
		Retry:      l.cfg.PollInterval,
		Timeout:    l.cfg.StatementTimeout, // connecting and LISTEN; the wait for notices has none
		Logger:     l.cfg.Logger,
		What:       "run notifications",
		Meanwhile:  fmt.Sprintf("polling every %s", l.cfg.PollInterval),
		Fix: "Give the worker a direct connection to PostgreSQL for LISTEN (runtime.Config.ListenConfig), " +
			"or set runtime.Config.PollOnly to poll without listening (docs/operations.md, Connection poolers).",
		Attrs: []any{"worker", l.cfg.Label},
	})
}

// listening is called each time the worker's LISTEN takes effect: what was
// announced before is claimed, the wakes applied, and the cancels of the runs
// it holds read again, so that a cancel whose notice it missed (sent before
// this LISTEN, or while it reconnected) is not left for the next heartbeat.
func (l *listener) listening() {
	l.claims.wakesDue.Store(true)
	l.claims.cancelsDue.Store(true)
	l.claims.signal()
}

// maxWakeLabel is the longest label a worker's wake notices name
// ('woke:<label>'; PostgreSQL's payload limit is 8000 bytes): a worker of a
// longer label has the runs its gives wake announced to every worker.
const maxWakeLabel = 1000

// delivering is called once the worker's LISTEN is known to hear the
// notices sent on the runs channel (and again after each reconnection):
// from now on the runs its gives of capacity wake are announced to it
// alone, as 'woke:<label>' (store.SetWakeTarget), when its label fits in a
// notice. Before, and whenever it does not listen (lost, or found behind a
// transaction pooler), they are announced to every worker: a notice naming
// it would reach no one, and the woken runs would wait for the others'
// later claims or for the next poll.
func (l *listener) delivering() {
	l.claims.hearing.Store(true)
	if len(l.cfg.Label) <= maxWakeLabel {
		l.store.SetWakeTarget(l.cfg.Label)
	}
}

// lost is called when the worker's LISTEN stops hearing notices, until it
// listens again: the runs its gives wake are announced to every worker.
func (l *listener) lost() {
	l.claims.hearing.Store(false)
	l.store.SetWakeTarget("")
}

// notified handles a notice on the runs channel: a run to claim (any
// payload), a wake to apply ("wake", a signal sent), the Cancel of a run
// ("cancel:<id>"), which the worker holding it carries out at once, and
// which is a wake too, or a backfill requested in SQL ("backfill"), for the
// schedules' ticker alone. A run woken by a worker's give of capacity
// ("woke:<label>") is that worker's to claim at once; the others claim
// wokeElsewhere later, for what it does not take.
func (l *listener) notified(payload string) {
	if label, ok := strings.CutPrefix(payload, "woke:"); ok {
		if label == l.cfg.Label {
			l.claims.signal()
		} else {
			l.claims.wakeSoon()
		}
		return
	}
	if payload == "backfill" {
		select {
		case l.backfills <- struct{}{}:
		default: // a wake is pending already
		}
		return
	}
	if id, ok := strings.CutPrefix(payload, "cancel:"); ok {
		l.claims.wakesDue.Store(true)
		if run, err := uuid.Parse(id); err == nil {
			if e := l.pool.get(run); e != nil {
				e.requestCancel()
			}
		}
	} else if payload == "wake" {
		l.claims.wakesDue.Store(true)
	}
	l.claims.signal()
}
