package dlocktest

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/inspect"
)

// Inspect returns what the Locker holds for the lock name, as
// (*dlock.Client).Inspect does: the holder's owner (dlock.WithOwner's
// text, "dlocktest" without it), token, fence, since when it holds the lock
// and what is left of its lease, on the Locker's clock, and how many wait for
// it; the kind, a read lock's readers and a semaphore's permits, and a name
// kept for its min hold (token "min-hold"), as the Client shows them, and
// the waiters in line (Queue, first first, with their owners; a waiter's
// Token is empty, as the double gives tokens at the grant, and its Alive is
// what is left of its wait). Key is empty: there is no Redis. A free name gives an *dlock.Error of
// Op "inspect" matching dlock.ErrNotHeld; so does a name a ForceUnlock gave
// to nobody.
func (l *Locker) Inspect(ctx context.Context, name string) (inspect.LockInfo, error) {
	if err := ctx.Err(); err != nil {
		return inspect.LockInfo{}, opError("inspect", name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	if e := l.sems[name]; e != nil && len(e.sem) > 0 {
		i := inspect.LockInfo{Name: name, Kind: dlock.KindSemaphore, Permits: e.permits, Waiters: int64(len(e.waiters)), Queue: queueOf(e, now),
			TTL: l.busyTTL(e)}
		for _, p := range e.sem {
			i.Holders = append(i.Holders, inspect.PermitInfo{Owner: p.owner, Token: p.token, Fence: p.fence, Since: p.since,
				Lease: p.ttl, TTL: p.leaseLeft(now)})
			i.Fence = max(i.Fence, p.fence)
			if i.Since.IsZero() || p.since.Before(i.Since) {
				i.Since = p.since
			}
		}
		i.Owner = fmt.Sprintf("%d/%d permits", len(i.Holders), i.Permits)
		return i, nil
	}
	e := l.names[name]
	switch {
	case e == nil:
	case e.holder != nil:
		h := e.holder
		return inspect.LockInfo{Name: name, Kind: dlock.KindExclusive, Owner: h.owner, Token: h.token, Fence: h.fence,
			Since: h.since, Lease: h.ttl, TTL: h.leaseLeft(now), Waiters: int64(len(e.waiters)), Queue: queueOf(e, now)}, nil
	case len(e.readers) > 0:
		i := inspect.LockInfo{Name: name, Kind: dlock.KindShared, Token: "*readers", TTL: e.leaseLeft(now),
			Waiters: int64(len(e.waiters)), Queue: queueOf(e, now)}
		for _, r := range e.holders() {
			i.Readers = append(i.Readers, inspect.ReaderInfo{Owner: r.owner, Token: r.token, Fence: r.fence, Since: r.since,
				Lease: r.ttl, TTL: r.leaseLeft(now)})
			i.Fence = max(i.Fence, r.fence)
			if i.Since.IsZero() || r.since.Before(i.Since) {
				i.Since = r.since
			}
		}
		return i, nil
	case !e.kept.IsZero():
		// Released before its min hold: held by nobody until kept, as
		// the Client's key with the token "min-hold".
		return inspect.LockInfo{Name: name, Kind: dlock.KindExclusive, Token: "min-hold", TTL: e.kept.Sub(now),
			Waiters: int64(len(e.waiters)), Queue: queueOf(e, now)}, nil
	}
	return inspect.LockInfo{}, opError("inspect", name, dlock.ErrNotHeld)
}

// maxQueueShown bounds LockInfo.Queue as the Client's Inspect does.
const maxQueueShown = 100

// queueOf lists the waiters of e in line, first first.
func queueOf(e *entry, now time.Time) []inspect.WaiterInfo {
	var q []inspect.WaiterInfo
	for _, w := range e.waiters[:min(len(e.waiters), maxQueueShown)] {
		q = append(q, inspect.WaiterInfo{Owner: cmp.Or(w.settings.Owner, "dlocktest"), Shared: w.settings.Shared,
			Alive: w.deadline.Sub(now)})
	}
	return q
}
