package dlockadmin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/inspect"
)

// maxFormBytes bounds an unlock request's body: a name, a fence and a token.
const maxFormBytes = 16 << 10

// unlockRequest is a force unlock as the operator asked for it: the lock and
// the fence of the holder they saw, plus the admin token they presented.
type unlockRequest struct {
	via   string // "api" or "form", for the audit trail
	name  string
	fence string // as sent; parsed after authentication
	token string // the admin token presented; "" when none
	bad   error  // an unreadable body, reported after authentication
}

// unlockResult is what one attempt came to.
type unlockResult struct {
	status  int
	msg     string           // for the client
	err     error            // an internal error behind msg, for the audit line only
	wait    time.Duration    // 429: when the client may try again
	removed inspect.LockInfo // on success: the holder removed
	current inspect.LockInfo // on a conflict: the holder now
}

// unlockAPI serves POST /api/locks/{name}/unlock?fence=N with
// Authorization: Bearer <admin token>.
func (h *handler) unlockAPI(w http.ResponseWriter, r *http.Request) {
	req := unlockRequest{via: "api", name: r.PathValue("name"), token: bearer(r)}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	req.bad = r.ParseForm()
	req.fence = r.Form.Get("fence") // the query string or a form body
	h.answerAPI(w, h.forceUnlock(r, req))
}

func (h *handler) answerAPI(w http.ResponseWriter, res unlockResult) {
	switch res.status {
	case http.StatusOK:
		writeJSON(w, http.StatusOK, map[string]any{"removed": LockOf(res.removed, h.now())})
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="dlockadmin"`)
		writeError(w, res.status, res.msg)
	case http.StatusConflict:
		writeJSON(w, res.status, map[string]any{"error": res.msg, "current": LockOf(res.current, h.now())})
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter(res.wait)))
		writeError(w, res.status, res.msg)
	default:
		writeError(w, res.status, res.msg)
	}
}

// bearer returns the token of an "Authorization: Bearer <token>" header, or
// "". The scheme is case-insensitive (RFC 9110, section 11.1).
func bearer(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// forceUnlock authenticates req, then removes the lock only if its holder is
// still the one the operator saw, identified by fence. Fences are handed out
// by a per-name counter that never goes back, so a fence names one
// acquisition of a lock, forever; a token prefix would be ambiguous and the
// full token must never reach a browser. The server reads the token itself
// (Inspect), checks the fence, and passes that token to ForceUnlock, whose
// compare-and-delete closes the race between the two calls: a lock that
// changed hands in between keeps its new holder.
func (h *handler) forceUnlock(r *http.Request, req unlockRequest) unlockResult {
	if h.cfg.adminToken == nil {
		return h.audit(r, req, unlockResult{status: http.StatusForbidden,
			msg: "force unlock is disabled: this admin view is read-only (" + h.cfg.enableHint + ")"})
	}
	if req.token == "" {
		msg := "force unlock needs the admin token: send Authorization: Bearer <token>"
		if req.via == "form" {
			msg = "force unlock needs the admin token: type it into the token field"
		}
		return h.audit(r, req, unlockResult{status: http.StatusUnauthorized, msg: msg})
	}
	key := clientKey(r.RemoteAddr)
	if wait, first := h.fails.check(key, h.now()); wait > 0 {
		res := unlockResult{status: http.StatusTooManyRequests, wait: wait,
			msg: fmt.Sprintf("too many wrong admin tokens from this address: try again in %ds", retryAfter(wait))}
		if !first {
			return res // logged once per lockout: a guesser does not get to fill the log
		}
		return h.audit(r, req, res)
	}
	if !h.tokenOK(req.token) {
		h.fails.failed(key, h.now())
		return h.audit(r, req, unlockResult{status: http.StatusUnauthorized, msg: "wrong admin token"})
	}
	if req.bad != nil {
		return h.audit(r, req, unlockResult{status: http.StatusBadRequest, msg: "unreadable request: " + req.bad.Error()})
	}
	if req.name == "" || len(req.name) > dlock.MaxNameLength {
		return h.audit(r, req, unlockResult{status: http.StatusBadRequest,
			msg: fmt.Sprintf("lock name must be 1 to %d bytes long", dlock.MaxNameLength)})
	}
	fence, err := strconv.ParseInt(req.fence, 10, 64)
	if err != nil || fence <= 0 {
		return h.audit(r, req, unlockResult{status: http.StatusBadRequest,
			msg: fmt.Sprintf("fence %q must be the positive fence of the holder to remove, as listed by GET /api/locks", clip(req.fence, 32))})
	}

	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.timeout)
	defer cancel()
	info, err := h.c.Inspect(ctx, req.name)
	if err != nil {
		return h.audit(r, req, failedUnlock(err))
	}
	token, ok := info.Token, info.Fence == fence
	if info.Kind == dlock.KindSemaphore {
		// Each permit has a fence of its own: it names the permit.
		ok = false
		for _, p := range info.Holders {
			if p.Fence == fence {
				token, ok = p.Token, true
			}
		}
	}
	if !ok {
		return h.audit(r, req, unlockResult{status: http.StatusConflict, current: info,
			msg: fenceDiffers(req.name, info, fence)})
	}
	// On ErrNotHeld, got is the holder ForceUnlock found instead.
	got, err := h.c.ForceUnlock(ctx, req.name, token)
	switch {
	case errors.Is(err, dlock.ErrNotHeld) && got.Token == "":
		return h.audit(r, req, unlockResult{status: http.StatusNotFound,
			msg: fmt.Sprintf("lock %q was released while it was being removed; nothing was removed", req.name)})
	case errors.Is(err, dlock.ErrNotHeld):
		return h.audit(r, req, unlockResult{status: http.StatusConflict, current: got,
			msg: fmt.Sprintf("lock %q changed hands while it was being removed; nothing was removed", req.name)})
	case err != nil:
		return h.audit(r, req, failedUnlock(err))
	}
	return h.audit(r, req, unlockResult{status: http.StatusOK, removed: got,
		msg: fmt.Sprintf("lock %q taken from %s (fence %d)", req.name, got.Owner, got.Fence)})
}

// failedUnlock is the result of an unlock that Redis or the Client failed:
// the client is told what public says, the audit line gets the rest.
func failedUnlock(err error) unlockResult {
	status, msg, internal := public(err)
	res := unlockResult{status: status, msg: msg}
	if internal {
		res.err = err
	}
	return res
}

// fenceDiffers says why an unlock named a fence the lock does not have. It
// does not say the lock changed hands: the fence may have been mistyped or
// copied from another row; all the server knows is that the fences differ.
func fenceDiffers(name string, info inspect.LockInfo, fence int64) string {
	if info.Kind == dlock.KindSemaphore {
		return fmt.Sprintf("lock %q: fence differs: no permit of the semaphore has fence %d now; nothing was removed", name, fence)
	}
	return fmt.Sprintf("lock %q: fence differs: its holder has fence %d, not %d as shown; nothing was removed", name, info.Fence, fence)
}

// tokenOK compares the presented token with the admin token in constant
// time. Both are hashed first: ConstantTimeCompare returns at once on
// different lengths, which would tell an attacker the token's length.
func (h *handler) tokenOK(presented string) bool {
	got, want := sha256.Sum256([]byte(presented)), sha256.Sum256(h.cfg.adminToken)
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// audit writes the audit line of one unlock attempt and returns res. Done
// unlocks and wrong tokens are warnings: the first broke a lock, the second
// may be someone guessing. The admin token and lock tokens are never logged,
// only a lock's token prefix.
func (h *handler) audit(r *http.Request, req unlockRequest, res unlockResult) unlockResult {
	level := slog.LevelInfo
	if res.status == http.StatusOK || res.status == http.StatusUnauthorized || res.status == http.StatusTooManyRequests {
		level = slog.LevelWarn
	}
	result := "refused"
	if res.status == http.StatusOK {
		result = "unlocked"
	}
	// Every value the client chose is clipped (logsafe.go).
	attrs := []slog.Attr{
		slog.String("remote", clip(r.RemoteAddr, maxLogValue)),
		slog.String("via", req.via),
		slog.String("lock", clip(req.name, maxLogValue)),
		slog.String("fence_seen", clip(req.fence, maxLogValue)),
		slog.String("result", result),
		slog.Int("status", res.status),
		slog.String("reason", clip(res.msg, maxLogReason)),
	}
	if res.err != nil {
		attrs = append(attrs, slog.String("error", clip(res.err.Error(), maxLogReason)))
	}
	if res.status == http.StatusOK {
		attrs = append(attrs, holderAttrs("removed", res.removed))
	} else if res.current.Token != "" {
		attrs = append(attrs, holderAttrs("holder", res.current))
	}
	// The request may be over; the audit line must still be written.
	h.cfg.log.LogAttrs(context.WithoutCancel(r.Context()), level, "dlockadmin: force unlock", attrs...)
	return res
}

func holderAttrs(key string, i inspect.LockInfo) slog.Attr {
	return slog.Group(key,
		slog.String("owner", clip(i.Owner, maxLogValue)),
		slog.Int64("fence", i.Fence),
		slog.String("token_prefix", i.TokenPrefix()),
		slog.Int64("waiters", i.Waiters),
	)
}

// crossOrigin answers a cross-origin browser POST, and records it: a page
// elsewhere tried to act through an operator's browser.
func (h *handler) crossOrigin(w http.ResponseWriter, r *http.Request) {
	h.cfg.log.LogAttrs(context.WithoutCancel(r.Context()), slog.LevelWarn, "dlockadmin: cross-origin request refused",
		slog.String("remote", clip(r.RemoteAddr, maxLogValue)),
		slog.String("method", clip(r.Method, maxLogValue)),
		slog.String("path", clip(r.URL.Path, maxLogValue)),
		slog.String("origin", clip(r.Header.Get("Origin"), maxLogValue)),
		slog.String("sec_fetch_site", clip(r.Header.Get("Sec-Fetch-Site"), maxLogValue)),
	)
	writeError(w, http.StatusForbidden, "cross-origin request refused: force unlock only from the admin page itself or a non-browser client")
}
