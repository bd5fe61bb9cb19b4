package dlockadmin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/flightcache"
)

// Bounds of what one request may write into the log. Whoever reaches the
// handler decides the lock name, the fence, the Origin header, without
// being authenticated; logged whole, one request with a 1 MB name wrote a
// 1 MB line. Each value is cut, with a marker saying how long it was: a
// valid lock name (at most dlock.MaxNameLength bytes) is always logged
// whole, and a line stays within a few KB.
const (
	maxLogValue  = dlock.MaxNameLength
	maxLogReason = 2 * dlock.MaxNameLength // a message that quotes a name
)

// clip returns s cut to at most n bytes, on a character boundary, with a
// marker that gives its length.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("…[truncated: %d bytes]", len(s))
}

// public is what a client is told of err, and its status. Errors about the
// request (a bad name, no such lock) are its own business and say so
// whole. Errors from inside (Redis unreachable, a closed Client, foreign
// data under the prefix) carry Redis' address and the network's view of
// it ("dial tcp 10.0.3.7:6379: connect: connection refused"), which the
// client, who need not be authenticated, has no use for: it gets a
// generic message, and internal is true so the caller logs err.
func public(err error) (status int, msg string, internal bool) {
	if errors.Is(err, flightcache.ErrNoTurn) {
		// Queued behind other listings (one runs at a time) past the
		// timeout: nothing failed inside, and nothing is logged, or a
		// flood of filters would write error lines and look like an
		// outage.
		return http.StatusServiceUnavailable, "busy: other listings ran first; try again in a moment", false
	}
	switch status = statusOf(err); status {
	case http.StatusServiceUnavailable:
		return status, "lock service unavailable: Redis did not answer in time (the admin server's log has the details)", true
	case http.StatusInternalServerError:
		return status, "a lock's key holds data dlock did not write (the admin server's log has the details)", true
	}
	return status, err.Error(), false
}

// failed logs err when it is internal and returns what the client is told.
func (h *handler) failed(ctx context.Context, op string, err error) (int, string) {
	status, msg, internal := public(err)
	// A client that hung up is not a failure of Redis worth an error line
	// (and would let anyone write them by opening and dropping requests).
	if internal && !errors.Is(ctx.Err(), context.Canceled) {
		h.cfg.log.LogAttrs(context.WithoutCancel(ctx), slog.LevelError, "dlockadmin: "+op+" failed",
			slog.Int("status", status), slog.String("error", clip(err.Error(), maxLogReason)))
	}
	return status, msg
}
