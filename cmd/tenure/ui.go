package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/ui"
)

// uiShutdown bounds how long tenure ui waits for requests in flight when
// it is told to stop.
const uiShutdown = 5 * time.Second

func (a *app) uiCommand() *cobra.Command {
	var (
		addr, token, traceURL string
		write, hidePayloads   bool
		hosts                 []string
	)
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web UI: failures by cause, run timelines, workers, requeues",
		Long: `Serve Tenure's web UI on --addr (127.0.0.1:8080: this machine only) and
print its URL: the open failures grouped by cause with their history, every
run with its timeline of steps and attempts, the policy of a step explained,
the workers and the runs no worker serves, the downstreams of flow control
with their limits, waiting runs and breakers.

It is read-only unless --write is given. Writes (requeue, purge, cancel; a
downstream's limits and breaker) then need a token: --token, or the environment variable TENURE_UI_TOKEN, or
else one is generated and printed. Open the printed login link once in the
browser; scripts send "Authorization: Bearer <token>". Every requeue and
purge is previewed first and recorded in the audit log with its note.

It stops on SIGINT or SIGTERM, letting requests in flight finish.`,
		Example: `  tenure ui
  tenure ui --addr 127.0.0.1:9090 --hide-payloads
  TENURE_UI_TOKEN=$(openssl rand -hex 16) tenure ui --write
  tenure ui --write --trace-url 'https://tempo.example/trace/{trace_id}?span={span_id}'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if token != "" && !write {
				return usagef("--token is for --write: without it the UI is read-only")
			}
			if token == "" && write {
				token = os.Getenv("TENURE_UI_TOKEN")
			}
			op, err := a.operator()
			if err != nil {
				return err
			}
			// The schema is checked now, not at the first page.
			if _, err := op.Workers(a.ctx, false); err != nil {
				return err
			}
			generated := false
			if write && token == "" {
				var b [16]byte
				_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
				token, generated = hex.EncodeToString(b[:]), true
			}
			// Only this address's names: a page of another site that
			// rebinds its name to 127.0.0.1 is refused (DNS rebinding).
			listenHost, _, _ := net.SplitHostPort(addr)
			allowed := append([]string{"localhost", "127.0.0.1", "::1"}, hosts...)
			if listenHost != "" {
				allowed = append(allowed, listenHost)
			}
			h, err := ui.New(ui.Config{Operator: op, Writes: write, Token: token, HidePayloads: hidePayloads,
				TraceURL: traceURL, AllowedHosts: allowed, Logger: slog.New(slog.NewTextHandler(a.stderr, nil))})
			if err != nil {
				return usageError{err}
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on --addr %s: %w", addr, err)
			}
			if w := ui.ListenWarning(ln.Addr().String()); w != "" {
				fmt.Fprintln(a.stderr, "warning: "+w)
			}
			base := "http://" + printable(ln.Addr()) + "/"
			mode := "read-only"
			if write {
				mode = "writes enabled"
			}
			fmt.Fprintf(a.stdout, "Tenure UI on %s (schema %s, %s)\n", base, a.schema, mode)
			switch {
			case generated:
				fmt.Fprintf(a.stdout, "token: %s\nlog in to write: %slogin?token=%s\n", token, base, token)
			case write:
				fmt.Fprintf(a.stdout, "log in to write: %slogin?token=<your token>\n", base)
			}
			return serve(a.ctx, ln, h)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on (host:port)")
	cmd.Flags().BoolVar(&write, "write", false, "enable the write actions (requeue, purge, cancel; a downstream's limits and breaker)")
	cmd.Flags().StringVar(&token, "token", "", "token the write actions need (default $TENURE_UI_TOKEN, else generated)")
	cmd.Flags().BoolVar(&hidePayloads, "hide-payloads", false, "never show inputs and outputs")
	cmd.Flags().StringVar(&traceURL, "trace-url", "", "trace link template with {trace_id} and {span_id}")
	cmd.Flags().StringSliceVar(&hosts, "allowed-host", nil, "another host name the UI answers to (behind a proxy, say); loopback names and --addr's are always allowed")
	return cmd
}

// serve serves h on ln until ctx ends, then shuts down, letting requests in
// flight finish for up to uiShutdown.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), uiShutdown)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// printable is the listener's address as a browser can open it: an
// unspecified host (":8080") becomes localhost.
func printable(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
