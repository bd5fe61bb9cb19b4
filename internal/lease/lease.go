// Package lease is the lease engine under every Redis Locker of dlock: what
// a held lock's lease is on the local clock (Margin, End), how it is kept
// alive (Renewer, with a lane per node), how a failed call is retried
// (Backoff, RetryBackoff) and for how long a token nobody holds is given
// back (GiveBackHorizon). It imports nothing of package dlock: each Locker
// (the core Client, redlock) is a backend that supplies the calls that
// differ.
package lease

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// Margin is taken off every lease before it counts as ours: the Redlock
// algorithm's allowance for a server clock running fast against ours
// (TTL/100 + 2ms), raised to a tenth of the TTL, because the holder's
// context must end early enough for its work to see it and stop before the
// server's lease runs out, and on a busy machine the timer, the goroutine
// that cancels and the work each wake tens of milliseconds late. One policy
// for every Locker: the core's and Redlock's had drifted apart.
func Margin(ttl time.Duration) time.Duration {
	return max(ttl/10, ttl/100+2*time.Millisecond)
}

// End is the deadline of a lease of ttl confirmed by a command sent at
// sent: the server dates the lease from when the command arrives, later,
// and Redis never shortens a lease, so this process never counts on a lease
// that ends later than the server's.
func End(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - Margin(ttl))
}

// RetryBackoff is the pause before retrying the renewal of a lease of ttl
// after failures failed tries in a row (from 1): a thirtieth of the TTL
// (at least 5ms), doubling, at most a third of the TTL, so that retries
// land well before the deadline.
func RetryBackoff(ttl time.Duration, failures int) time.Duration {
	n := min(max(failures, 1), 5)
	return min(max(ttl/30, 5*time.Millisecond)<<(n-1), ttl/3)
}

// Backoff is the pause between tries of a background call that must get
// through (a give-back): from 20ms, doubling, at most a second.
type Backoff struct{ next time.Duration }

// Next returns the pause before the next try.
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		b.next = 20 * time.Millisecond
	} else {
		b.next = min(2*b.next, time.Second)
	}
	return b.next
}

// GiveBackHorizon is how long a token is tried to be given back after its
// grant (of ttl) or hand-off was heard of too late or not at all, or its
// queue entry (alive for alive) was left: for as long as it could still
// hold something in Redis. Stopping earlier (a queue entry's life, or 3 s)
// stranded a grant held by nobody for the rest of its TTL after an outage
// of a few seconds.
func GiveBackHorizon(ttl, alive time.Duration) time.Duration {
	return max(alive, ttl)
}

// ReleaseRecordTTL is how long Redis keeps the record of a token's release,
// so that the same release sent again (go-redis re-sends a command after a
// read timeout or a reset) reports success rather than a false ErrNotHeld.
// It covers go-redis' default retries with their timeouts several times
// over.
const ReleaseRecordTTL = 30 * time.Second

// NewToken returns 128 random bits, hex encoded. crypto/rand does not fail
// on supported platforms (it crashes the program rather than return weak
// bytes), so there is no error to handle.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Pause waits d, and reports false if done closed first (a Locker's Close).
// A d already past is no wait and reports true, even after Close: the work
// it was to wait for is due now (with both ready, select would pick either).
func Pause(d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// Retry runs try until it succeeds, with Backoff between tries, giving up
// when the next try would start after until or done closes: the one loop
// of every give-back.
func Retry(until time.Time, done <-chan struct{}, try func() error) {
	var b Backoff
	for try() != nil {
		pause := b.Next()
		if time.Now().Add(pause).After(until) || !Pause(pause, done) {
			return
		}
	}
}

// LapsedGiveBack is when the key of a lock lost at its deadline may be given
// back: at served, the end of the last lease Redis (or a quorum) confirmed,
// and not before a margin after now, when its context ends. The margin is
// the holder's, for its work to see the end and stop; a deadline found late
// (its timer held back by GC or a starved CPU, Context asked after a stop)
// ends the context only now (TestLateLapseGiveBackKeepsMarginAfterContextEnd,
// in the root package and redlock).
func LapsedGiveBack(served time.Time, ttl time.Duration) time.Time {
	return maxTime(served, time.Now().Add(Margin(ttl)))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
