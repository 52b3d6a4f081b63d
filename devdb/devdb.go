// Package devdb gives a program a PostgreSQL database to develop against:
// the server DATABASE_URL names, or, when it is unset, a private throwaway
// cluster that lives as long as the program. Tenure's examples run on it,
// so that each runs with one go run on a machine that has PostgreSQL
// installed and no server set up.
//
//	db, err := devdb.Open(ctx)
//	if err != nil {
//		return err // says how to fix it: set DATABASE_URL or install PostgreSQL
//	}
//	defer db.Close()
//	fmt.Println("tenure:", db) // where the program's data goes
//	pool, err := pgxpool.New(ctx, db.URL)
//
// The private cluster is started from the PostgreSQL server programs
// (initdb, pg_ctl, postgres) on PATH or under /usr/lib/postgresql/*/bin, as
// the postgres user when the program runs as root. It listens on a unix
// socket only, in a new folder under the system's temporary folder, with
// durability off (fsync, synchronous_commit and full_page_writes): its data
// are thrown away by Close, and a cluster whose program died without Close
// is removed by the next one started on the machine.
//
// devdb is for examples, prototypes and demos. A program of your own
// connects to the database its configuration names, as the program of
// docs/getting-started.md does, and its tests use package tenuretest.
package devdb

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/pgtest"
)

// EnvVar names the environment variable that holds the URL of the server to
// use. When it is unset or empty, Open starts a private cluster.
const EnvVar = "DATABASE_URL"

// DB is a database to develop against, opened by Open. Print it to say
// which database a program uses: its String never shows a password.
type DB struct {
	// URL is the connection string to give pgxpool.New: the value of
	// DATABASE_URL, or the private cluster's, of the form
	// postgres://postgres@/postgres?host=<socket folder>&sslmode=disable.
	URL string
	// Private is true when Open started a private cluster, whose data Close
	// removes.
	Private bool

	desc string
	stop func() error
	once sync.Once
	err  error
}

// Open returns the database named by DATABASE_URL, once a connection to it
// has answered, or, when DATABASE_URL is unset, a private cluster started
// for this DB, which takes a few seconds. ctx bounds the connection check;
// a cluster being started is not interrupted. The error of a failed Open
// says how to fix it. Close the DB when the program ends.
func Open(ctx context.Context) (*DB, error) {
	if u := os.Getenv(EnvVar); u != "" {
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			return nil, fmt.Errorf("devdb: %s is not a connection string: %w", EnvVar, err)
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("devdb: the server of %s does not answer (unset %s to use a private cluster): %w", EnvVar, EnvVar, err)
		}
		_ = conn.Close(ctx)
		return &DB{URL: u, desc: describe(cfg) + " (" + EnvVar + ")"}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("devdb: %w", err)
	}
	u, stop, err := pgtest.Start()
	if err != nil {
		return nil, fmt.Errorf("devdb: %s is not set and no private cluster could be started: %w", EnvVar, err)
	}
	desc := "a private PostgreSQL cluster"
	if cfg, err := pgx.ParseConfig(u); err == nil {
		desc = describe(cfg)
	}
	desc += " (a private cluster, removed on exit; set " + EnvVar + " to keep the data)"
	return &DB{URL: u, Private: true, desc: desc, stop: stop}, nil
}

// Close stops the private cluster, if Open started one, and removes its
// folder and data. It does nothing to the server of DATABASE_URL. Calls
// after the first return the first one's error.
func (db *DB) Close() error {
	db.once.Do(func() {
		if db.stop != nil {
			if err := db.stop(); err != nil {
				db.err = fmt.Errorf("devdb: stop the private cluster: %w", err)
			}
		}
	})
	return db.err
}

// String says which database db is, without its password: for example
// "database test on 127.0.0.1:5432 as postgres (DATABASE_URL)", or
// "database postgres on /tmp/pgtest-…/sock as postgres (a private cluster,
// removed on exit; set DATABASE_URL to keep the data)".
func (db *DB) String() string { return db.desc }

// describe names the database, server and user of cfg. A unix socket is
// named by its folder.
func describe(cfg *pgx.ConnConfig) string {
	server := cfg.Host
	if len(server) == 0 || server[0] != '/' {
		server += ":" + strconv.Itoa(int(cfg.Port))
	}
	return "database " + cfg.Database + " on " + server + " as " + cfg.User
}
