package dlockadmin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/dlock-go/dlock"
)

// readyTimeout bounds the Redis round trip of /readyz: a probe that hangs is
// worse than one that fails.
const readyTimeout = 2 * time.Second

// readyProbeName is the lock /readyz looks up. Only read, never written: any
// answer from Redis, held or not, proves the round trip works.
const readyProbeName = "dlockadmin:readyz"

// NewServeMux returns the mux of an admin server (the CLI's `dlock serve`):
//
//   - / the admin view, NewHandler(c, opts...)
//   - /metrics metrics, when metrics is not nil (a Prometheus handler, say)
//   - GET /healthz liveness: 200 "ok" while the process serves HTTP. It does
//     not touch Redis, so that an orchestrator does not restart a healthy
//     process because Redis is down, which a restart would not fix.
//   - GET /readyz readiness: 200 "ready" when one read from Redis succeeds
//     within 2s, else 503 "not ready" (the error itself goes to the
//     WithLogger logger, not to the prober).
//
// The mux is returned so the caller can add routes of its own. The error is
// NewHandler's.
func NewServeMux(c *dlock.Client, metrics http.Handler, opts ...Option) (*http.ServeMux, error) {
	h, admin, err := newHandler(c, opts...)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", admin)
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		w.Header().Set("Cache-Control", "no-store")
		if _, err := c.Inspect(ctx, readyProbeName); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			// Probes need not authenticate: the reason goes to the log.
			_, msg := h.failed(ctx, "readyz", err)
			http.Error(w, "not ready: "+msg, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux, nil
}
