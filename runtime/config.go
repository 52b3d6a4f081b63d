package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/store"
	"github.com/tenurehq/tenure/policy"
	"github.com/tenurehq/tenure/sdk"
)

// Config configures a Worker. Every zero field takes the default its comment
// names.
type Config struct {
	// Concurrency is how many runs the worker executes at once. Default 10.
	Concurrency int
	// LeaseTTL is how long a claim or heartbeat holds a run without renewal.
	// A worker that dies is noticed this long after its last heartbeat.
	// Default 30s.
	LeaseTTL time.Duration
	// HeartbeatInterval is how often the worker renews all its leases, in one
	// statement. Default LeaseTTL/3; must be below LeaseTTL.
	HeartbeatInterval time.Duration
	// StatementTimeout bounds each statement and batch the worker sends
	// (claims, renewals, reads) and each connection it opens: one that takes
	// longer is cancelled and its connection closed, so a black-holed
	// network cannot hold a run, the heartbeat or Shutdown. A run's write
	// may wait for the batch before its own, so each of its tries gets twice
	// that; a write that times out is retried while the run's lease can
	// still be held. The start-up checks of Start and Run use the caller's
	// context. Default HeartbeatInterval, but at least 1s (or LeaseTTL/2 when
	// that is shorter, for tiny test leases); must be below LeaseTTL.
	StatementTimeout time.Duration
	// PollInterval is how often an idle worker looks for due runs when no
	// notification arrives (expired leases and delayed runs are only found by
	// polling). Default 1s.
	PollInterval time.Duration
	// ListenConfig is the connection the worker LISTENs on to hear of new
	// runs at once. Default: one with the pool's settings. A connection
	// pooler in transaction mode (pgbouncer pool_mode=transaction, most
	// hosted poolers) accepts LISTEN but delivers no notification: give a
	// direct connection to PostgreSQL here (from pgx.ParseConfig), or set
	// PollOnly. Nothing but LISTEN uses it; see docs/operations.md,
	// "Connection poolers".
	ListenConfig *pgx.ConnConfig
	// PollOnly turns LISTEN off: an idle worker finds new runs only at its
	// next poll, so a run may wait up to PollInterval longer to start, and
	// the worker needs one connection less. A worker that listens checks
	// once that its notifications arrive; when they do not, it logs why and
	// falls back to polling by itself. Default false. PollOnly and
	// ListenConfig are exclusive.
	PollOnly bool
	// RequireSynchronousReplication makes Health report an error while the
	// database server has standbys it does not wait for at commit
	// (Worker.Replication is record.ReplicationAsynchronous), or is a standby: for
	// a deployment that counts on a failover losing nothing. Default false:
	// the worker says so once in its log and keeps working.
	RequireSynchronousReplication bool
	// Queues are the queues this worker serves. Default ["default"].
	Queues []string
	// Label names the worker for people and traces ("host-pid-random" by
	// default). Two workers may share a label: then each claims at once the
	// runs either's release of a downstream's capacity wakes (the notice
	// names the label), as every worker would without it.
	Label string
	// BuildID names the build of the program the worker runs: recorded on
	// its registry row, on each run it claims first and on each step it
	// writes (schema version 18; docs/deploying.md). 1 to 64 letters,
	// digits and . _ + : -. Default: the VCS revision the binary was built
	// from (its first 12 characters, "+dirty" when the tree was modified),
	// else "sha256:" and the first 12 hex digits of the binary's hash.
	BuildID string
	// Schema is the schema of Tenure's tables. Default "tenure".
	Schema string
	// Defaults is the worker-wide policy layer, below each activity's
	// defaults and each call's options.
	Defaults []policy.Option
	// MaxInProcessSleep is the longest retry delay slept with the lease held;
	// longer delays suspend the run durably. Default 10s.
	MaxInProcessSleep time.Duration
	// MaxPayload is the largest step or workflow output, in bytes of JSON.
	// Default sdk.DefaultMaxPayload.
	MaxPayload int
	// Logger receives warnings (lost leases) and errors. Default slog.Default().
	Logger *slog.Logger
	// Observer receives every segment and attempt, for tracing and metrics
	// (see the otel package). Default: none.
	Observer Observer
}

func (c Config) withDefaults() (Config, error) {
	if c.Concurrency == 0 {
		c.Concurrency = 10
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.LeaseTTL / 3
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = max(c.HeartbeatInterval, min(time.Second, c.LeaseTTL/2))
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if len(c.Queues) == 0 {
		c.Queues = []string{"default"}
	}
	if c.Label == "" {
		c.Label = defaultLabel()
	}
	if c.BuildID == "" {
		c.BuildID = DefaultBuildID()
	}
	if c.Schema == "" {
		c.Schema = store.DefaultSchema
	}
	if c.MaxInProcessSleep == 0 {
		c.MaxInProcessSleep = 10 * time.Second
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = sdk.DefaultMaxPayload
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	switch {
	case c.Concurrency < 0:
		return c, fmt.Errorf("runtime: Concurrency %d is negative", c.Concurrency)
	case c.LeaseTTL < 100*time.Millisecond:
		return c, fmt.Errorf("runtime: LeaseTTL %s is below 100ms", c.LeaseTTL)
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.LeaseTTL:
		return c, fmt.Errorf("runtime: HeartbeatInterval %s must be positive and below LeaseTTL %s", c.HeartbeatInterval, c.LeaseTTL)
	case c.StatementTimeout <= 0 || c.StatementTimeout >= c.LeaseTTL:
		return c, fmt.Errorf("runtime: StatementTimeout %s must be positive and below LeaseTTL %s", c.StatementTimeout, c.LeaseTTL)
	case c.PollInterval < 0 || c.MaxInProcessSleep < 0 || c.MaxPayload < 0:
		return c, fmt.Errorf("runtime: negative PollInterval, MaxInProcessSleep or MaxPayload")
	case c.PollOnly && c.ListenConfig != nil:
		return c, fmt.Errorf("runtime: PollOnly and ListenConfig are exclusive: a poll-only worker does not LISTEN")
	}
	for _, q := range c.Queues {
		if q == "" {
			return c, fmt.Errorf("runtime: empty queue name")
		}
	}
	if err := store.ValidateBuildID(c.BuildID); err != nil {
		return c, fmt.Errorf("runtime: BuildID: %w", err)
	}
	if _, err := policy.Resolve(c.Defaults); err != nil {
		return c, fmt.Errorf("runtime: worker default policy: %w", err)
	}
	return c, nil
}

func defaultLabel() string {
	host, err := os.Hostname()
	if err != nil {
		host = "worker"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
