package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
	"github.com/dlock-go/dlock/dlockprom"
)

// adminTokenEnv enables force unlock in the served page; a flag would put
// the token in ps and shell history.
const adminTokenEnv = "DLOCK_ADMIN_TOKEN"

// Bounds of serve's connections. Without them a client holds a connection,
// and its goroutine and buffers, for as long as it likes: by sending nothing
// on a keep-alive, or its body a byte at a time.
const (
	serveReadHeaderTimeout = 5 * time.Second
	// serveReadTimeout covers headers and body; an unlock's body is a few
	// fields, at most 16 KB.
	serveReadTimeout = 10 * time.Second
	// serveWriteTimeout is above the longest a handler works: a listing
	// is bounded by 10 s (dlockadmin.DefaultTimeout), a scrape's fleet
	// listing by 3 s.
	serveWriteTimeout = 30 * time.Second
	// serveIdleTimeout is above the page's 10 s refresh, so that an open
	// page reuses its connection.
	serveIdleTimeout = 15 * time.Second
	// serveMaxHeaderBytes fits a URL with a lock name at its longest
	// (512 bytes, three times that escaped) many times over; Go's default,
	// 1 MB, let one request write a 1 MB name into the audit log.
	serveMaxHeaderBytes = 64 << 10
)

func newServeCmd(a *app) *cobra.Command {
	var listen, title string
	cmd := &cobra.Command{
		Use:   "serve [--listen 127.0.0.1:7480]",
		Short: "Serve the admin view of held locks and /metrics over HTTP",
		Long: `Serve the admin view (an HTML page and a JSON API at /api/locks listing the
locks held now, the hottest names and the longest holders), /metrics in the
Prometheus format, and /healthz and /readyz.

The view is read-only unless $` + adminTokenEnv + ` is set: then each lock can be
force-unlocked by a POST that carries that token (as a bearer token, or in
the page's form). Force unlock breaks mutual exclusion if the holder is alive.

The token must be at least 16 bytes (make one with openssl rand -hex 32);
wrong tokens from one address are answered 429 after 5, then allowed one a
second. Answers never say why Redis failed (that goes to stderr), logged
values are cut at 512 bytes, and connections are bounded: headers 5s, a
whole request 10s, an answer 30s, an idle keep-alive 15s, headers 64 KB.

It listens on loopback by default; put it behind your own authentication
before you listen on anything else. It exits 3 when it cannot listen on
--listen (the port is in use, say), 2 when --listen is not host:port.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.serve(cmd.Context(), listen, title)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7480", "address to listen on")
	cmd.Flags().StringVar(&title, "title", dlockadmin.DefaultTitle, "title of the page")
	return cmd
}

func (a *app) serve(ctx context.Context, listen, title string) error {
	tok := a.getenv(adminTokenEnv)
	if tok != "" && len(tok) < dlockadmin.MinAdminTokenLength {
		// Before anything connects or listens. Its length only: the
		// message may be pasted into a ticket.
		return usagef("$%s is %d bytes long: the admin token must be at least %d bytes, as it is all that stands between "+
			"whoever reaches serve and breaking any lock; make one with: openssl rand -hex 32", adminTokenEnv, len(tok), dlockadmin.MinAdminTokenLength)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	col := dlockprom.NewCollector()
	a.noProbe = true // serve may start before Redis: /readyz tells
	c, _, closeAll, err := a.locker(dlock.WithObserver(col))
	if err != nil {
		return err
	}
	defer closeAll()

	reg := prometheus.NewRegistry()
	reg.MustRegister(col, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// What an operator of the whole fleet wants from this process: the
	// locks every process holds in Redis, read at scrape time within a
	// budget, cached, one listing at a time.
	fleet, err := dlockprom.NewFleetCollector(c)
	if err != nil {
		return err
	}
	reg.MustRegister(fleet)

	opts := []dlockadmin.Option{
		dlockadmin.WithTitle(title),
		dlockadmin.WithLogger(slog.New(slog.NewTextHandler(a.stderr, nil))),
		dlockadmin.WithReadOnlyHint("set " + adminTokenEnv + " in the environment of dlock serve and restart it"),
	}
	if tok != "" {
		opts = append(opts, dlockadmin.WithForceUnlock(tok))
	}
	mux, err := dlockadmin.NewServeMux(c, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), opts...)
	if err != nil {
		return err
	}

	ln, err := listenOn(listen)
	if err != nil {
		return err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		// Said where the operator who typed --listen :7482 reads it: the
		// page needs no login, and the lock names and owners it lists
		// may be sensitive.
		exposed := "sees every lock and its owner"
		if tok != "" {
			exposed += ", and may guess at the admin token"
		}
		fmt.Fprintf(a.stderr, "dlock: warning: --listen %s is reachable from other machines (%s), and serve has no authentication of its own: "+
			"anyone who reaches it %s; put it behind TLS and your own authentication, or listen on 127.0.0.1\n",
			listen, reachableFrom(tcp), exposed)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: serveReadHeaderTimeout,
		ReadTimeout:       serveReadTimeout,
		WriteTimeout:      serveWriteTimeout,
		IdleTimeout:       serveIdleTimeout,
		MaxHeaderBytes:    serveMaxHeaderBytes,
	}
	unlock := "disabled (set " + adminTokenEnv + " to enable)"
	if tok != "" {
		unlock = "enabled"
	}
	fmt.Fprintf(a.stderr, "dlock: admin view on http://%s/ (metrics at /metrics); force unlock %s\n", ln.Addr(), unlock)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listenOn listens on addr. A malformed address is a usage error (2); an
// address that is well formed but cannot be had (in use, not ours, no
// permission) is the machine's state, not the command line's: exit 3, so a
// supervisor retrying on 3 retries it.
func listenOn(addr string) (net.Listener, error) {
	if _, port, err := net.SplitHostPort(addr); err != nil {
		return nil, usagef("--listen %q: want host:port, as 127.0.0.1:7480: %v", addr, err)
	} else if _, err := net.LookupPort("tcp", port); err != nil {
		return nil, usagef("--listen %q: bad port: %v", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &exitError{code: exitRedis, err: fmt.Errorf("serve: cannot listen on %s: %w", addr, err)}
	}
	return ln, nil
}

// reachableFrom says which interfaces a listener not on loopback serves.
func reachableFrom(tcp *net.TCPAddr) string {
	if tcp.IP.IsUnspecified() {
		return "every interface"
	}
	return tcp.IP.String()
}
