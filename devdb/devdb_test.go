package devdb_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/devdb"
	"github.com/tenurehq/tenure/tenuretest"
)

// tenuretest.URL may start a private cluster for the tests that need a
// server at DATABASE_URL; Main stops it.
func TestMain(m *testing.M) { os.Exit(tenuretest.Main(m)) }

func TestOpen_UsesDatabaseURLAndNeverPrintsItsPassword(t *testing.T) {
	u, err := url.Parse(tenuretest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	// The test server trusts its clients: a password is accepted, and unused.
	u.User = url.UserPassword(u.User.Username(), "s3cret-password")
	t.Setenv(devdb.EnvVar, u.String())

	db, err := devdb.Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	if db.URL != u.String() || db.Private {
		t.Errorf("Open = %q (private %v), want DATABASE_URL's %q", db.URL, db.Private, u)
	}
	desc := db.String()
	if strings.Contains(desc, "s3cret") || !strings.HasSuffix(desc, " (DATABASE_URL)") || !strings.HasPrefix(desc, "database ") {
		t.Errorf("String = %q, want the database, server and user, from DATABASE_URL, without the password", desc)
	}
	conn, err := pgx.Connect(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(t.Context())
}

func TestOpen_WithoutDatabaseURLStartsAPrivateClusterThatCloseRemoves(t *testing.T) {
	t.Setenv(devdb.EnvVar, "")
	db, err := devdb.Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = db.Close()
		}
	}()
	if !db.Private || !strings.HasSuffix(db.String(), " (a private cluster, removed on exit; set DATABASE_URL to keep the data)") {
		t.Errorf("Open = %q (private %v), want a private cluster", db, db.Private)
	}
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(cfg.Host) {
		t.Fatalf("private cluster on %q, want a unix socket only", cfg.Host)
	}
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var fsync string
	err = conn.QueryRow(t.Context(), "SHOW fsync").Scan(&fsync)
	_ = conn.Close(t.Context())
	if err != nil || fsync != "off" {
		t.Errorf("fsync = %q, %v; a throwaway cluster runs without durability", fsync, err)
	}

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if err := db.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if conn, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		_ = conn.Close(ctx)
		t.Error("the private cluster still answers after Close")
	}
	if _, err := os.Stat(cfg.Host); !os.IsNotExist(err) {
		t.Errorf("the cluster's socket folder %s is still there after Close (%v)", cfg.Host, err)
	}
}

func TestOpen_SaysHowToFixADatabaseURLThatDoesNotAnswer(t *testing.T) {
	t.Setenv(devdb.EnvVar, "postgres://postgres:s3cret@127.0.0.1:1/none?sslmode=disable&connect_timeout=5")
	db, err := devdb.Open(t.Context())
	if err == nil {
		_ = db.Close()
		t.Fatal("Open succeeded on a port nobody listens on")
	}
	if msg := err.Error(); !strings.Contains(msg, "the server of DATABASE_URL does not answer (unset DATABASE_URL to use a private cluster)") ||
		strings.Contains(msg, "s3cret") {
		t.Errorf("Open: %v", err)
	}
}

func TestOpen_RefusesADatabaseURLThatIsNoConnectionString(t *testing.T) {
	t.Setenv(devdb.EnvVar, "postgres://[::1")
	if db, err := devdb.Open(t.Context()); err == nil || !strings.Contains(err.Error(), "DATABASE_URL is not a connection string") {
		if db != nil {
			_ = db.Close()
		}
		t.Errorf("Open: %v", err)
	}
}
