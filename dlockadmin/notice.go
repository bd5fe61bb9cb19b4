package dlockadmin

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
	"time"
)

// The result of a force unlock from the page is shown after a redirect
// (Post/Redirect/Get), so that a reload of the result repeats a GET and never
// the POST. The result waits for that GET here, under a random id carried
// in the redirect's URL: an id in a link cannot be made to say anything,
// where a message in the query string could be forged by whoever sends the
// operator a link.
const (
	noticeTTL = 5 * time.Minute // long enough for the redirect, and a reload or two
	maxNotice = 256             // bounds the memory a flood of POSTs can take
)

type notice struct {
	OK           bool
	Msg          string
	TokenRefused bool // the admin token was wrong: the page forgets it
	at           time.Time
}

type noticeStore struct {
	mu sync.Mutex
	m  map[string]notice
}

func newNoticeStore() *noticeStore { return &noticeStore{m: map[string]notice{}} }

// put keeps n and returns its id. When full, it drops expired notices, then
// the oldest.
func (s *noticeStore) put(n notice, now time.Time) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	n.at = now
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxNotice {
		oldest := ""
		for k, v := range s.m {
			if now.Sub(v.at) > noticeTTL {
				delete(s.m, k)
			} else if oldest == "" || v.at.Before(s.m[oldest].at) {
				oldest = k
			}
		}
		if len(s.m) >= maxNotice {
			delete(s.m, oldest)
		}
	}
	s.m[id] = n
	return id
}

// get returns the notice of id while it is fresh. It is not consumed: a
// reload of the result page shows the result again, as the operator expects.
func (s *noticeStore) get(id string, now time.Time) (notice, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.m[id]
	if !ok || now.Sub(n.at) > noticeTTL {
		return notice{}, false
	}
	return n, true
}

// The notices of the refusals anyone can cause, before the admin token was
// accepted (missing, wrong, read-only, too many guesses): fixed texts under
// fixed ids, never stored.
var fixedNotices = map[string]notice{
	"token-missing": {Msg: "force unlock needs the admin token: type it into the token field"},
	"token-refused": {Msg: "wrong admin token", TokenRefused: true},
	"read-only":     {Msg: "force unlock is disabled: this admin view is read-only"},
	"rate-limited":  {Msg: "too many wrong admin tokens from this address: wait a few seconds and try again"},
}

// fixedNoticeID returns the fixed id of res when it is a refusal before
// authentication.
func fixedNoticeID(req unlockRequest, res unlockResult) (string, bool) {
	switch {
	case res.status == http.StatusForbidden:
		return "read-only", true
	case res.status == http.StatusTooManyRequests:
		return "rate-limited", true
	case res.status == http.StatusUnauthorized && req.token == "":
		return "token-missing", true
	case res.status == http.StatusUnauthorized:
		return "token-refused", true
	}
	return "", false
}

// notice returns the notice of id: a fixed one, or one stored while fresh.
func (h *handler) notice(id string) (notice, bool) {
	if n, ok := fixedNotices[id]; ok {
		if id == "read-only" {
			n.Msg += " (" + h.cfg.enableHint + ")"
		}
		return n, true
	}
	return h.notices.get(id, h.now())
}
