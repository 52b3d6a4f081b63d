package pgtest

import (
	"fmt"
	"os"
	"time"
)

// Cluster is a private throwaway cluster that its owner may restart: for
// tests of how clients survive a database restart.
type Cluster struct{ c *cluster }

// StartCluster starts a private throwaway cluster, whatever DATABASE_URL
// says, as Start does, and returns it. Stop it with Stop.
func StartCluster() (*Cluster, error) {
	c, err := startPrivate()
	if err != nil {
		return nil, err
	}
	return &Cluster{c: c}, nil
}

// URL returns the cluster's connection string.
func (c *Cluster) URL() string { return c.c.url }

// Restart restarts the server with pg_ctl restart in fast mode: every
// connection is closed, then the server starts again on the same socket.
// It returns once the server accepts connections.
func (c *Cluster) Restart() error { return c.restart("fast") }

// RestartImmediate restarts the server with pg_ctl restart in immediate
// mode: the server processes are killed without a checkpoint, as in a crash,
// and the server recovers from its WAL when it starts again. The private
// cluster runs with synchronous_commit off, which loses commits in such a
// crash: set it on first (ALTER SYSTEM, then Restart) when the test counts
// on its commits.
func (c *Cluster) RestartImmediate() error { return c.restart("immediate") }

func (c *Cluster) restart(mode string) error {
	err := c.c.r.run(c.c.dir, 2*time.Minute, "pg_ctl", "restart", "-D", c.c.data, "-l", c.c.log, "-m", mode, "-w", "-t", "90", "-s")
	if err != nil {
		log, _ := os.ReadFile(c.c.log)
		return fmt.Errorf("%w\nserver log:\n%s", err, tail(string(log), 2000))
	}
	return nil
}

// Stop stops the server and removes the cluster's folder.
func (c *Cluster) Stop() error { return c.c.destroy() }
