package dlocktest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lockerkit"
)

// Locker is an in-memory dlock.Locker with the semantics of *dlock.Client:
// the same validation and errors, waits in FIFO order with hand-off, fences
// that grow per name, leases that end on its Clock, a lock context that
// ends with the Client's causes, and read locks (dlock.WithShared) with the
// Client's rules: writers first, readers let in together. It starts no goroutines (with the real
// clock, package time runs expiries), and is safe for concurrent use.
//
// It supports dlock.WithPermits (a semaphore of n permits per name, FIFO, each
// permit its own lease; see WithPermits and Expire) with the Client's refusals
// (dlock.ErrMismatch). ForceUnlock acts on exclusive locks only.
//
// All Lockers made by New are independent: locks of one are invisible to
// another. Several goroutines sharing one Locker stand for the instances of
// a service sharing one Redis.
type Locker struct {
	clock  Clock
	bounds lockerkit.TTLBounds

	// mu guards everything below and the state of every lock and waiter of
	// this Locker: one mutex, so there is no lock order to get wrong. It is
	// taken before the ManualClock's.
	mu     sync.Mutex
	names  map[string]*entry // names held or waited for
	sems   map[string]*entry // semaphores (WithPermits) held or waited for: see semaphore.go
	fences map[string]int64  // the last fence handed out per name
	live   map[*lock]struct{}
	closed bool
}

// entry is one name that is held or waited for. A free name has no waiters:
// the moment it is freed, the first live waiter gets it.
type entry struct {
	holder  *lock              // the exclusive holder, or nil
	readers map[*lock]struct{} // the shared holders (dlock.WithShared), when no holder
	waiters []*waiter          // in arrival order
	// kept is set while the name is held by nobody after a release (or a
	// lease run out) before the holder's min hold (dlock.WithMinHold); the
	// name is free, or handed to the first waiter, at kept, as in Redis.
	kept     time.Time
	keptStop func() bool

	permits int     // a semaphore's n, agreed while it has holders or waiters
	sem     []*lock // a semaphore's holders, in grant order
}

// waiter is one Acquire waiting for a name. Its outcome is decided once,
// under Locker.mu, by whoever comes first: a hand-off, the wait limit, the
// caller's context, Close.
type waiter struct {
	ctx      context.Context
	settings lockerkit.AcquireSettings
	deadline time.Time     // the wait limit, on the clock
	stop     func() bool   // the wait limit's timer
	done     chan struct{} // closed once decided
	lock     *lock         // granted
	err      error         // or gave up
	sem      bool          // waits for a permit (WithPermits)
}

var _ dlock.Locker = (*Locker)(nil)

// New returns an empty Locker. Invalid options give an error matching
// dlock.ErrInvalidOption or dlock.ErrInvalidTTL, an *dlock.Error of Op
// "new", as dlock.New does.
func New(opts ...Option) (*Locker, error) {
	cfg := config{clock: realClock{}, bounds: lockerkit.DefaultTTLBounds}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.bounds.Check(cfg.bounds.Default); cfg.err == nil && err != nil {
		cfg.err = fmt.Errorf("%w (WithDefaultTTL)", err)
	}
	if cfg.err != nil {
		return nil, &dlock.Error{Op: "new", Err: cfg.err}
	}
	return &Locker{clock: cfg.clock, bounds: cfg.bounds, names: map[string]*entry{}, sems: map[string]*entry{},
		fences: map[string]int64{}, live: map[*lock]struct{}{}}, nil
}

// MustNew is New for options fixed in the test: it panics where New returns
// an error.
func MustNew(opts ...Option) *Locker {
	l, err := New(opts...)
	if err != nil {
		panic(err)
	}
	return l
}

// TryAcquire makes one attempt to take the lock name, as
// (*dlock.Client).TryAcquire does: when another holder has it, the error
// matches dlock.ErrNotObtained and is a *dlock.NotObtainedError whose
// HolderTTL is what is left of the holder's lease. Invalid input gives the
// Client's errors (lockerkit.ReadAcquireOptions), checked before the lock is
// looked at; then come a closed Locker (dlock.ErrClosed) and a context that
// has already ended (its error). On error the Lock is nil.
//
// WithReplicas is accepted and always satisfied: there are no replicas;
// WithDurableGrant likewise: there is no disk a restart could lose.
func (l *Locker) TryAcquire(ctx context.Context, name string, opts ...dlock.AcquireOption) (dlock.Lock, error) {
	return l.acquire(ctx, name, opts, false)
}

// Acquire takes the lock name, waiting while another holder has it, as
// (*dlock.Client).Acquire does: waiters of a name get it in arrival order,
// the holder's release (or its loss) hands it straight to the first, with a
// new fence and a lease that starts then. The wait ends without the lock
// when the wait limit passes on the Locker's clock (dlock.WithWait, default
// dlock.DefaultWait; WithWait(0) makes one attempt), when ctx ends, or when
// the Locker is closed; the error matches dlock.ErrNotObtained, and also
// ctx's error when ctx ended the wait, or is dlock.ErrClosed.
//
// A waiter whose context ended or whose wait limit passed is never handed
// the lock, even if its goroutine has not noticed yet.
func (l *Locker) Acquire(ctx context.Context, name string, opts ...dlock.AcquireOption) (dlock.Lock, error) {
	return l.acquire(ctx, name, opts, true)
}

// Do runs fn while holding the lock name: Acquire, then dlock.Run, as
// (*dlock.Client).Do does.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...dlock.AcquireOption) error {
	lk, err := l.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return dlock.Run(ctx, lk, fn)
}

func (l *Locker) acquire(ctx context.Context, name string, opts []dlock.AcquireOption, wait bool) (dlock.Lock, error) {
	s, err := lockerkit.ReadAcquireOptions(name, l.bounds, opts...)
	switch {
	case err != nil:
	case s.Reentrant:
		// Refused as any acquisition is, though it would take nothing.
		if err = l.usable(ctx, name); err != nil {
			break
		}
		var nested dlock.Lock
		if nested, err = lockerkit.Reenter(ctx, name, s, l.owns); nested != nil {
			return nested, nil
		}
	default:
		err = lockerkit.CheckReentry(ctx, name, l.owns)
	}
	if err != nil {
		return nil, err
	}
	lk, err := l.take(ctx, name, s, wait)
	if err == nil && s.Reentrant {
		return lockerkit.Reentrant(lk, s), nil
	}
	return lk, err
}

// take grants name now, or waits for it when wait allows.
func (l *Locker) take(ctx context.Context, name string, s lockerkit.AcquireSettings, wait bool) (dlock.Lock, error) {
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return nil, opError("acquire", name, dlock.ErrClosed)
	case ctx.Err() != nil:
		l.mu.Unlock()
		return nil, opError("acquire", name, ctx.Err())
	}
	e := l.names[name]
	if s.Permits > 0 {
		var lk *lock
		var err error
		if e, lk, err = l.tryPermit(ctx, name, s); err != nil {
			l.mu.Unlock()
			return nil, err
		} else if lk != nil {
			l.mu.Unlock()
			return lk, nil
		}
	} else if err := l.permitsHeld(name, s); err != nil {
		l.mu.Unlock()
		return nil, err
	} else if e == nil || e.admits(s) {
		lk := l.grant(ctx, name, s)
		l.mu.Unlock()
		return lk, nil
	}
	if !wait || s.Wait == 0 {
		err := l.busy(name, e, s, nil)
		l.mu.Unlock()
		return nil, err
	}
	w := &waiter{ctx: ctx, settings: s, deadline: l.clock.Now().Add(s.Wait), done: make(chan struct{}), sem: s.Permits > 0}
	e.waiters = append(e.waiters, w)
	w.stop = l.clock.AfterFunc(s.Wait, func() { l.waitLimit(name, w) })
	l.mu.Unlock()

	select {
	case <-w.done:
	case <-ctx.Done():
		l.mu.Lock()
		l.giveUp(name, w, ctx.Err())
		l.handOff(name)
		l.mu.Unlock()
	}
	// Decided under mu before done was closed, or just above.
	if w.lock != nil {
		return w.lock, nil
	}
	return nil, w.err
}

// grant makes a Lock of name for the caller whose context is ctx, and makes
// it the name's holder. l.mu must be held.
func (l *Locker) grant(ctx context.Context, name string, s lockerkit.AcquireSettings) *lock {
	now := l.clock.Now()
	l.fences[name]++
	lk := &lock{l: l, name: name, token: newToken(s.Shared), fence: l.fences[name], renew: s.Renew, shared: s.Shared,
		ttl: s.TTL, maxHold: s.MaxHold, leased: now, until: now.Add(s.TTL), owner: s.Owner, since: now,
		minHold: s.MinHold, granted: now, sem: s.Permits > 0}
	if lk.owner == "" {
		lk.owner = "dlocktest"
	}
	if s.MaxHold > 0 {
		lk.hold = now.Add(s.MaxHold)
	}
	// The lock's context keeps the caller's values (trace ids) but not its
	// cancellation, and carries the lock itself, as the Client's does.
	lk.ctx, lk.cancel = context.WithCancelCause(dlock.NewContext(context.WithoutCancel(ctx), lk))
	if lk.sem {
		lk.token = semPrefix + lk.token
		e := l.sems[name]
		e.permits = s.Permits
		e.sem = append(e.sem, lk)
	} else {
		e := l.names[name]
		if e == nil {
			e = &entry{}
			l.names[name] = e
		}
		if s.Shared {
			if e.readers == nil {
				e.readers = map[*lock]struct{}{}
			}
			e.readers[lk] = struct{}{}
		} else {
			e.holder = lk
		}
	}
	l.live[lk] = struct{}{}
	lk.arm(now)
	return lk
}

// free makes name free of its holder (and of a min hold's wait) and hands
// it on. l.mu must be held.
func (l *Locker) free(name string) {
	e := l.names[name]
	if e == nil {
		return
	}
	e.holder = nil
	e.unkeep()
	l.handOff(name)
}

// release ends lk's hold at now: a permit is handed on; a reader leaves;
// the writer frees the name, or keeps it for its min hold. l.mu must be
// held.
func (l *Locker) release(lk *lock, now time.Time) {
	if lk.sem {
		l.freeOf(lk)
		return
	}
	if lk.shared {
		l.drop(lk)
		return
	}
	l.freeOrKeep(lk, now)
}

// giveUp ends w's wait without the lock, unless its outcome was decided
// already: cause is the context's error that ended it, or nil for the wait
// limit. l.mu must be held.
func (l *Locker) giveUp(name string, w *waiter, cause error) {
	if w.lock != nil || w.err != nil {
		return
	}
	w.stop()
	var e *entry
	if e = l.entryOf(name, w.sem); e != nil {
		if i := slices.Index(e.waiters, w); i >= 0 {
			e.waiters = slices.Delete(e.waiters, i, i+1)
		}
		if w.sem && len(e.waiters) == 0 && len(e.sem) == 0 {
			delete(l.sems, name)
		}
	}
	w.err = l.busy(name, e, w.settings, cause)
	close(w.done)
}

// waitLimit runs on the clock when w's wait limit passes.
func (l *Locker) waitLimit(name string, w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.giveUp(name, w, nil)
	l.handOff(name)
}

// Expire ends the lease of the lock name's holder now, as a lease that ran
// out does: the holder stopped renewing, or its renewals failed until its
// lease deadline. The holder's context ends first, with a cause matching
// dlock.ErrLockLost; then the name is handed to the first waiter, or free.
// The old holder's Refresh, TTL and Release report dlock.ErrNotHeld.
//
// On a semaphore (dlock.WithPermits) name, it ends the oldest permit's lease
// and hands that permit to the first waiter.
//
// It reports whether name was held.
func (l *Locker) Expire(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.names[name]
	if e == nil || !e.held() {
		if e != nil && !e.kept.IsZero() {
			l.free(name) // the key kept for a min hold, deleted
			return false
		}
		return l.expirePermit(name)
	}
	for _, lk := range e.holders() {
		lk.lose(fmt.Errorf("%w: no renewal confirmed before the lease deadline (dlocktest: Expire)", dlock.ErrLockLost))
		l.drop(lk)
	}
	return true
}

// ForceUnlock takes the lock name from its holder as an operator's force
// unlock does ((*dlock.Client).ForceUnlock, `dlock unlock`), or a key
// deleted in Redis: the name is handed to the first waiter, or free, at once,
// but the holder learns only at its next renewal, a third of its TTL after
// the last one on the clock, or at the end of its lease if it is not
// renewed, or when it calls Refresh (dlock.ErrNotHeld, and its context ends
// with a cause matching dlock.ErrLockLost) or Release (dlock.ErrNotHeld). Until
// then two holders believe they hold the lock, as in Redis: use it to test
// that the resource refuses the stale holder's fence.
//
// It reports whether name was held.
func (l *Locker) ForceUnlock(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.names[name]
	if e == nil || !e.held() {
		if e != nil && !e.kept.IsZero() {
			l.free(name) // the key kept for a min hold, deleted
		}
		return false
	}
	now := l.clock.Now()
	for _, old := range e.holders() {
		old.state = taken
		if old.renew {
			old.notice = old.nextRenewal(now)
		}
		old.arm(now)
		l.drop(old)
	}
	return true
}

// Held reports whether the lock name has a holder.
func (l *Locker) Held(name string) bool {
	_, ok := l.Holder(name)
	return ok
}

// Holder returns the Lock that holds name now, as its acquirer got it; when
// readers (dlock.WithShared) hold it, the one that has held it longest.
func (l *Locker) Holder(name string) (dlock.Lock, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.names[name]; e != nil && e.held() {
		return e.holders()[0], true
	}
	return nil, false
}

// Waiters returns how many Acquire calls wait for name now. A test can wait
// for it to reach n before it releases or advances the clock, so that it
// knows the waiters are in line, and in which order.
func (l *Locker) Waiters(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	if e := l.names[name]; e != nil {
		n += len(e.waiters)
	}
	if e := l.sems[name]; e != nil {
		n += len(e.waiters)
	}
	return n
}

// Close releases the locks still held (their contexts end with a cause
// matching both dlock.ErrReleased and dlock.ErrClosed, as the Client's; a
// later Release reports dlock.ErrNotHeld) and ends the
// waits under way; those waits and every acquisition after Close fail with
// an error matching dlock.ErrClosed, as with a closed Client. It returns
// nil: there is nothing that can fail. ctx is not used; it is there so that
// Close has the Client's signature. Closing twice does no harm.
func (l *Locker) Close(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	for _, m := range []map[string]*entry{l.names, l.sems} {
		for name, e := range m {
			e.unkeep()
			for _, w := range e.waiters {
				w.stop()
				w.err = opError("acquire", name, dlock.ErrClosed)
				close(w.done)
			}
		}
	}
	for lk := range l.live {
		lk.end(released, errClosedRelease)
	}
	clear(l.names)
	clear(l.sems)
	return nil
}

// errClosedRelease is the cause of a lock Close released.
var errClosedRelease = lockerkit.ErrReleasedByClose

func opError(op, name string, err error) error {
	return &dlock.Error{Op: op, Name: name, Err: err}
}

// busy is the error of a name held by another, as the Client gives it.
func (l *Locker) busy(name string, e *entry, s lockerkit.AcquireSettings, cause error) error {
	if e == nil {
		return opError("acquire", name, lockerkit.NewNotObtainedError(name, 0, cause))
	}
	ne := lockerkit.NewNotObtainedError(name, l.busyTTL(e), cause)
	// Who holds it, as the Client's busy error says (the waiters in line
	// counting this one, as Redis' queue would).
	ne.Waiters = int64(len(e.waiters))
	owner := s.Owner
	if owner == "" {
		owner = "dlocktest"
	}
	switch {
	case e.permits > 0:
		ne.Kind, ne.Held, ne.Permits = dlock.KindSemaphore, len(e.sem), e.permits
	case e.holder != nil:
		ne.Kind, ne.Owner, ne.Self = dlock.KindExclusive, e.holder.owner, e.holder.owner == owner
	case len(e.readers) > 0:
		ne.Kind, ne.Readers = dlock.KindShared, len(e.readers)
	case !e.kept.IsZero():
		ne.Kind, ne.MinHold = dlock.KindExclusive, true
	}
	return opError("acquire", name, ne)
}

// owns reports whether x is one of l's locks (for lockerkit.CheckReentry).
func (l *Locker) owns(x dlock.Lock) bool {
	lk, ok := x.(*lock)
	return ok && lk != nil && lk.l == l
}

// usable reports why an acquisition cannot start: the Locker closed, or ctx
// ended.
func (l *Locker) usable(ctx context.Context, name string) error {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	switch {
	case closed:
		return opError("acquire", name, dlock.ErrClosed)
	case ctx.Err() != nil:
		return opError("acquire", name, ctx.Err())
	}
	return nil
}
