package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newPool opens a pool of exactly size connections, all of them connected
// before it returns, so that no timed part pays for connecting.
func newPool(ctx context.Context, url string, size int32) (*pgxpool.Pool, error) {
	return newNamedPool(ctx, url, size, appName, nil)
}

// newNamedPool is newPool with application_name name (appName and more:
// the noise watcher counts the others), and the settings params.
func newNamedPool(ctx context.Context, url string, size int32, name string, params map[string]string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns, cfg.MinConns = size, size
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	conns := make([]*pgxpool.Conn, 0, size)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range size {
		c, err := pool.Acquire(ctx)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("connect: %w", err)
		}
		conns = append(conns, c)
	}
	return pool, nil
}

// dropSchema removes a schema and everything in it, so each workload starts
// from empty tables.
func dropSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	_, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	return err
}

// callers runs fn(i) for i in [0, n) from k goroutines and returns each
// call's duration; it stops at the first error.
func callers(ctx context.Context, n, k int, fn func(ctx context.Context, i int) error) ([]time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(k, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				began := time.Now()
				if err := fn(ctx, i); err != nil {
					cancel(fmt.Errorf("run %d: %w", i, err))
					return
				}
				d[i] = time.Since(began)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// waitFor polls done every interval until it is true or the timeout passes.
func waitFor(ctx context.Context, interval, timeout time.Duration, what string, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done after %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
