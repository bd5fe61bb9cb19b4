package dlockadmin

import (
	"math"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Wrong admin tokens are limited per client address, so that a token can
// only be guessed slowly, and a guesser fills neither the audit log nor
// the CPU with SHA-256s: failBurst wrong tokens at once (an operator's
// typos), then one more per failEvery. While an address is over its limit
// its unlocks are answered 429, whatever token they carry: checking the
// token would be another guess.
const (
	failBurst = 5
	failEvery = time.Second
	// maxTracked bounds the addresses remembered. Past it, the addresses
	// not remembered share one limit: a guesser spread over many
	// addresses is still limited, and memory is not theirs to fill.
	maxTracked = 4096
)

type failLimiter struct {
	mu        sync.Mutex
	addrs     map[string]*failBucket
	overflow  failBucket // the limit the addresses beyond maxTracked share
	lastPrune time.Time
}

// failBucket is a token bucket of wrong attempts: full at failBurst, one
// taken per wrong token, one back every failEvery.
type failBucket struct {
	tokens  float64
	at      time.Time // when tokens was last brought up to date; zero: never used
	refused bool      // refused since its last allowed attempt: only the first refusal is logged
}

func newFailLimiter() *failLimiter { return &failLimiter{addrs: map[string]*failBucket{}} }

func (b *failBucket) refill(now time.Time) {
	if b.at.IsZero() {
		b.tokens = failBurst
	} else if d := now.Sub(b.at); d > 0 {
		b.tokens = min(failBurst, b.tokens+float64(d)/float64(failEvery))
	}
	b.at = now
}

// check returns 0 when key may present a token now; else how long until it
// may, and whether this is the first refusal since it last could.
func (l *failLimiter) check(key string, now time.Time) (wait time.Duration, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, now, false)
	if b == nil {
		return 0, false // never failed, or forgotten once back to full
	}
	b.refill(now)
	if b.tokens >= 1 {
		b.refused = false
		return 0, false
	}
	first, b.refused = !b.refused, true
	return time.Duration((1 - b.tokens) * float64(failEvery)), first
}

// failed takes one attempt from key's bucket: it presented a wrong token.
func (l *failLimiter) failed(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, now, true)
	b.refill(now)
	// Concurrent wrong tokens may all have passed check: each still
	// counts, and the bucket owes the excess.
	b.tokens--
}

// bucket returns key's bucket, or the shared overflow when key is not
// remembered and the table is full. With create, a new key gets a bucket
// of its own if room can be made by forgetting addresses whose bucket is
// full again (they carry no history); else nil for an unknown key.
func (l *failLimiter) bucket(key string, now time.Time, create bool) *failBucket {
	if b, ok := l.addrs[key]; ok {
		return b
	}
	if len(l.addrs) >= maxTracked && now.Sub(l.lastPrune) >= failEvery {
		// At most once per failEvery: under a spread attack every
		// failure would otherwise scan the whole table.
		l.lastPrune = now
		for k, b := range l.addrs {
			if b.refill(now); b.tokens >= failBurst {
				delete(l.addrs, k)
			}
		}
	}
	if len(l.addrs) >= maxTracked {
		return &l.overflow
	}
	if !create {
		return nil
	}
	b := &failBucket{}
	l.addrs[key] = b
	return b
}

// retryAfter is wait in whole seconds, as the Retry-After header takes it,
// rounded up so that a client that waits that long is let in.
func retryAfter(wait time.Duration) int { return max(1, int(math.Ceil(wait.Seconds()))) }

// clientKey is the address wrong tokens are counted by: the peer's IP, or
// for IPv6 its /64, which one host commonly has whole. Behind a reverse
// proxy every client is the proxy: they share one limit.
func clientKey(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return clip(host, maxLogValue)
	}
	if ip = ip.Unmap(); ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
