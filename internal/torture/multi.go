package torture

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// setStep is one turn of a worker in a run with opts.Sets: it takes 2–3 of
// the run's names at once with dlock.AcquireAll, given in an order drawn
// at random (AcquireAll must sort them, or overlapping sets deadlock until
// their waits run out), works under all of them, and releases each. Every
// name of the set is recorded as a Hold of its own, beginning when
// AcquireAll returned and ending at the earliest of Done and that member's
// loss: the checker judges each name as it judges single locks.
//
// With opts.SetsSkipOne the set is broken on purpose: the last name given
// is recorded as held but never taken. With opts.SetsGivenOrder it is taken
// name by name in the order given (see givenOrder).
func (r *inproc) setStep(ctx context.Context, i int, c *dlock.Client, rng *rand.Rand, seq *int) {
	perm := rng.Perm(len(r.names))
	names := make([]string, 0, 3)
	for _, p := range perm[:min(2+rng.IntN(2), len(perm))] {
		names = append(names, r.names[p])
	}
	work := r.work(rng)
	take := names
	if r.opts.SetsSkipOne {
		take = names[:len(names)-1]
	}
	asked := Now()
	var locks []dlock.Lock
	var err error
	if r.opts.SetsGivenOrder {
		locks, err = givenOrder(ctx, c, take, r.opts.TTL, r.opts.Wait)
	} else {
		var m *dlock.MultiLock
		if m, err = dlock.AcquireAll(ctx, c, take, dlock.WithTTL(r.opts.TTL), dlock.WithWait(r.opts.Wait)); err == nil {
			locks = m.Locks()
		}
	}
	if err != nil {
		// The name that failed, as AcquireAll's *Error names it.
		name := strings.Join(take, ",")
		var de *dlock.Error
		if errors.As(err, &de) && de.Name != "" {
			name = de.Name
		}
		r.rec.attempt(Attempt{Worker: i, Name: name, Asked: asked, End: Now(), Outcome: attemptOutcome(err), Err: err.Error()})
		if !errors.Is(err, dlock.ErrNotObtained) {
			sleepCtx(ctx, 5*time.Millisecond)
		}
		return
	}
	*seq++
	got := Now()

	// One watcher per member: a member lost before Done ends that name's
	// hold, whatever the others do.
	type member struct {
		h     Hold
		l     dlock.Lock // nil for the name SetsSkipOne left out
		mu    sync.Mutex
		lost  int64
		fired chan struct{}
		stop  func() bool
	}
	byName := map[string]dlock.Lock{}
	for _, l := range locks {
		byName[l.Name()] = l
	}
	var done bool
	var doneMu sync.Mutex
	ms := make([]*member, len(names))
	for k, name := range names {
		x := &member{h: Hold{Worker: i, Seq: *seq, Name: name, Asked: asked, Got: got}, l: byName[name],
			fired: make(chan struct{}), stop: func() bool { return true }}
		if x.l != nil {
			x.h.Fence = x.l.Fence()
			x.stop = context.AfterFunc(x.l.Context(), func() {
				defer close(x.fired)
				doneMu.Lock()
				if !done {
					x.mu.Lock()
					x.lost = Now()
					x.mu.Unlock()
				}
				doneMu.Unlock()
			})
		}
		ms[k] = x
	}

	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	vals := make([]int64, len(ms))
	for k, x := range ms {
		if x.l != nil {
			vals[k], x.h.Read = r.res.Read(rctx, i, x.h.Name, x.h.Fence)
		}
	}
	time.Sleep(work)
	for k, x := range ms {
		if x.h.Read == "ok" {
			x.h.Write = r.res.Write(rctx, i, x.h.Name, x.h.Fence, vals[k])
		}
	}
	doneMu.Lock()
	done = true
	now := Now()
	for _, x := range ms {
		x.h.Done = now
	}
	doneMu.Unlock()

	// Each member on its own, so that one lost member's "not held" is
	// not reported for the names that were still held.
	for _, x := range ms {
		if x.l == nil {
			x.h.Release, x.h.Released = "ok", Now()
			r.rec.hold(x.h)
			continue
		}
		err := x.l.Release(rctx)
		if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			err = x.l.Release(rctx)
		}
		x.h.Release = releaseOutcome(err)
		x.h.Released = Now()
		x.h.Final = causeOf(context.Cause(x.l.Context()))
		if !x.stop() {
			<-x.fired
		}
		x.mu.Lock()
		x.h.Lost = x.lost
		x.mu.Unlock()
		if x.h.Lost != 0 {
			x.h.Cause = causeOf(context.Cause(x.l.Context()))
		}
		r.rec.hold(x.h)
	}
}

// givenOrder is AcquireAll without its canonical order: each name in the
// order given, each with the whole wait, the names taken released on a
// failure. Two sets that share two names in opposite orders wait for each
// other until one's wait runs out.
func givenOrder(ctx context.Context, c *dlock.Client, names []string, ttl, wait time.Duration) ([]dlock.Lock, error) {
	var locks []dlock.Lock
	for _, name := range names {
		l, err := c.Acquire(ctx, name, dlock.WithTTL(ttl), dlock.WithWait(wait))
		if err != nil {
			for _, l := range locks {
				_ = l.Release(context.WithoutCancel(ctx))
			}
			return nil, err
		}
		locks = append(locks, l)
	}
	return locks, nil
}
