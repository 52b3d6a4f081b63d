package operator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/listener"
	"github.com/tenurehq/tenure/record"
)

// DefaultAwaitPoll is how often AwaitRun reads the run besides the notices
// of its end, unless AwaitOptions.Poll says otherwise: the delay a missed
// notice costs at most, as sdk's Result polls by default.
const DefaultAwaitPoll = time.Second

// AwaitOptions says how AwaitRun waits. The zero value wakes on the notice
// of the run's end, reads the run every DefaultAwaitPoll besides, follows
// no steps and logs nothing.
type AwaitOptions struct {
	// Poll is how often the run's progress is read besides the notices; it
	// must not be negative, and 0 is DefaultAwaitPoll. Steps end without a
	// notice, so a caller that follows them polls more often.
	Poll time.Duration
	// Steps makes each read count the run's ended steps as well
	// (record.Progress.StepsEnded and LastStepEnd), for Progress to follow them.
	Steps bool
	// Progress, when set, is called with each read of the run's progress,
	// the first and the last (the one that finds the run ended) included;
	// an error from it ends the wait with that error.
	Progress func(record.Progress) error
	// PollOnly turns the LISTEN connection off: the run is read every Poll
	// and at no notice.
	PollOnly bool
	// Logger receives the warnings of the LISTEN connection (lost, or
	// reaching a transaction pooler that delivers no notice); nil logs
	// none: the poll covers what the notices miss either way.
	Logger *slog.Logger
}

// AwaitRun waits until run runID has ended (completed, failed or
// cancelled) and returns it, read whole once then, as Run reads it.
//
// Until then it reads only the run's progress (RunProgress): its status
// and end, by primary key, without its payloads; with o.Steps, also how
// many of its steps have ended. It reads it at once, again at each notice
// of the run's end on the schema's done channel (a LISTEN on a connection
// of its own, opened with the pool's settings, as sdk's Result listens),
// each time that LISTEN takes effect (a notice sent before it was missed),
// and every o.Poll besides, so a notice lost, or a pooler that delivers
// none, costs a poll interval at most.
//
// It returns an error wrapping ErrNotFound for a run that does not exist,
// and ctx's error when ctx ends first: give ctx a deadline to wait for a
// while only.
func (op *Operator) AwaitRun(ctx context.Context, runID uuid.UUID, o AwaitOptions) (record.Run, error) {
	if err := op.ready(ctx); err != nil {
		return record.Run{}, err
	}
	switch {
	case o.Poll < 0:
		return record.Run{}, fmt.Errorf("operator.AwaitRun: negative poll interval %s", o.Poll)
	case o.Poll == 0:
		o.Poll = DefaultAwaitPoll
	}
	wake := make(chan struct{}, 1)
	if !o.PollOnly {
		lctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			op.listenDone(lctx, runID, wake, o)
		}()
		defer wg.Wait()
		defer stop()
	}
	for {
		p, err := op.RunProgress(ctx, runID, o.Steps)
		if err != nil {
			return record.Run{}, err
		}
		if o.Progress != nil {
			if err := o.Progress(p); err != nil {
				return record.Run{}, err
			}
		}
		if p.Status.Terminal() {
			return op.Run(ctx, runID)
		}
		t := time.NewTimer(o.Poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return record.Run{}, fmt.Errorf("await run %s: %w", runID, ctx.Err())
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// RunProgress reads how far run runID has got, without its payloads: its
// status and end (a lookup by primary key) and, with steps, how many of
// its steps have ended and when the last did (an aggregate over the run's
// steps, reading none of their outputs). What AwaitRun polls. It returns an
// error wrapping ErrNotFound for a run that does not exist.
func (op *Operator) RunProgress(ctx context.Context, runID uuid.UUID, steps bool) (record.Progress, error) {
	ctx, cancel := op.bounded(ctx)
	defer cancel()
	if err := op.ready(ctx); err != nil {
		return record.Progress{}, err
	}
	return op.store.RunProgress(ctx, runID, steps)
}

// listenDone LISTENs on the done channel until ctx ends (package listener:
// reconnecting with backoff, and giving up on a pooler that delivers no
// notice), and sends on wake, without blocking, at each notice that names
// runID and each time the LISTEN takes effect.
func (op *Operator) listenDone(ctx context.Context, runID uuid.UUID, wake chan<- struct{}, o AwaitOptions) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	want := runID.String()
	// It returns nil once ctx ends, or ErrNotDelivered: AwaitRun then polls
	// alone, as it does while the connection is down.
	_ = listener.Run(ctx, listener.Config{
		Channel: op.store.DoneChannel(),
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, op.store.Pool().Config().ConnConfig.Copy())
		},
		Send:      op.store.Notify,
		Dropped:   op.store.Dropped,
		Listening: signal,
		Notify: func(payload string) {
			for id := range strings.SplitSeq(payload, ",") {
				if strings.TrimSpace(id) == want {
					signal()
					return
				}
			}
		},
		Retry:     min(o.Poll, time.Second),
		Timeout:   op.timeout,
		Logger:    logger,
		What:      "run end notifications",
		Meanwhile: fmt.Sprintf("AwaitRun polling every %s", o.Poll),
		Fix:       "Give the operator a pool with a direct connection to PostgreSQL, or set AwaitOptions.PollOnly.",
	})
}
