package lease

import (
	"context"
	"sync"
	"sync/atomic"
)

// Owner is what a Locker owns, for its Close: the locks it holds, the
// acquisitions under way, and the background work it started (grants being
// given back, a Redlock's calls left to finish). One copy of the rules:
//
//   - once Shut, no acquisition begins and no lock is tracked: an
//     acquisition already under way that obtains a lock releases it itself
//     (it asks Closed), and Shut's caller waits for it on the channel Shut
//     returns;
//   - once StopBackground, no background work starts (Go reports false,
//     and the caller does the work itself or drops it); WaitBackground waits
//     for what started.
//
// Each Locker's Close calls these in its order (the core lets background
// work start while its releases run, so that a release that fails can still
// give its grant back; a Redlock stops it at once and runs its releases'
// calls on its own goroutines). L is the Locker's lock type.
type Owner[L comparable] struct {
	closed atomic.Bool // Shut: read without mu on every call

	mu       sync.Mutex
	held     map[L]struct{}
	busy     int           // acquisitions under way
	drained  chan struct{} // closed when busy drops to 0 after Shut
	bgClosed bool          // StopBackground: no Go after it
	bg       sync.WaitGroup
}

// NewOwner returns an Owner that holds nothing.
func NewOwner[L comparable]() *Owner[L] { return &Owner[L]{held: map[L]struct{}{}} }

// Closed reports whether Shut has begun.
func (o *Owner[L]) Closed() bool { return o.closed.Load() }

// Begin counts an acquisition under way, unless Shut has begun: then it
// reports false and the caller sends nothing.
func (o *Owner[L]) Begin() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed.Load() {
		return false
	}
	o.busy++
	return true
}

// End uncounts an acquisition Begin counted.
func (o *Owner[L]) End() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.busy--
	if o.busy == 0 && o.drained != nil {
		close(o.drained)
		o.drained = nil
	}
}

// Track records a lock for Close, and reports false once Shut has begun:
// the caller releases the lock again.
func (o *Owner[L]) Track(l L) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed.Load() {
		return false
	}
	o.held[l] = struct{}{}
	return true
}

// Untrack forgets a lock that ended.
func (o *Owner[L]) Untrack(l L) {
	o.mu.Lock()
	delete(o.held, l)
	o.mu.Unlock()
}

// Holds reports whether one of the locks tracked now satisfies match. It
// walks them all: for a busy error's hint, not for a hot path.
func (o *Owner[L]) Holds(match func(L) bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for l := range o.held {
		if match(l) {
			return true
		}
	}
	return false
}

// Shut begins Close: no acquisition begins and no lock is tracked after it.
// It returns the locks held now, for the caller to release, and a channel
// closed once the acquisitions under way have ended (nil when none is).
// Every Shut while acquisitions are under way gets the same channel.
func (o *Owner[L]) Shut() (held []L, drained <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed.Store(true)
	if o.busy > 0 {
		if o.drained == nil {
			o.drained = make(chan struct{})
		}
		drained = o.drained
	}
	held = make([]L, 0, len(o.held))
	for l := range o.held {
		held = append(held, l)
	}
	return held, drained
}

// Go runs fn on a goroutine that WaitBackground waits for, and reports
// false, running nothing, once StopBackground was called.
func (o *Owner[L]) Go(fn func()) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bgClosed {
		return false
	}
	o.bg.Go(fn)
	return true
}

// StopBackground makes Go refuse from now on.
func (o *Owner[L]) StopBackground() {
	o.mu.Lock()
	o.bgClosed = true
	o.mu.Unlock()
}

// WaitBackground stops new background work and waits for what started.
func (o *Owner[L]) WaitBackground() {
	o.StopBackground()
	o.bg.Wait()
}

// Drained waits for drained (from Shut) or ctx, whichever ends first; a
// nil drained is no wait.
func Drained(ctx context.Context, drained <-chan struct{}) {
	if drained == nil {
		return
	}
	select {
	case <-drained:
	case <-ctx.Done():
	}
}

// Busy returns how many acquisitions are under way.
func (o *Owner[L]) Busy() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.busy
}

// Draining reports whether a Shut waits for acquisitions under way.
func (o *Owner[L]) Draining() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.drained != nil
}
