package dlocktest

import (
	"context"

	"github.com/dlock-go/dlock"
)

// Inspect returns what the Locker holds for the lock name, as
// (*dlock.Client).Inspect does: the holder's owner (dlock.WithAcquireOwner's
// text, "dlocktest" without it), token, fence, since when it holds the lock
// and what is left of its lease, on the Locker's clock, and how many wait for
// it. Key is empty: there is no Redis. A free name gives an *dlock.Error of
// Op "inspect" matching dlock.ErrNotHeld; so does a name a ForceUnlock gave
// to nobody.
func (l *Locker) Inspect(ctx context.Context, name string) (dlock.LockInfo, error) {
	if err := ctx.Err(); err != nil {
		return dlock.LockInfo{}, opError("inspect", name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.names[name]
	if e == nil || e.holder == nil {
		return dlock.LockInfo{}, opError("inspect", name, dlock.ErrNotHeld)
	}
	h := e.holder
	return dlock.LockInfo{Name: name, Owner: h.owner, Token: h.token, Fence: h.fence, Since: h.since,
		Lease: h.ttl, TTL: h.leaseLeft(l.clock.Now()), Waiters: int64(len(e.waiters))}, nil
}
