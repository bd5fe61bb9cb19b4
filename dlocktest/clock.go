package dlocktest

import (
	"slices"
	"sync"
	"time"
)

// Clock is the time a Locker measures leases, hold limits and wait limits
// on. The default is the real clock (package time); NewClock makes a manual
// one that moves only when the test says so.
//
// Implementations must be safe for concurrent use, and AfterFunc must never
// call f before it has returned: the Locker calls it while holding its own
// mutex, which f takes.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f once d has passed, in a goroutine of its own or in
	// the one that moves the clock. stop cancels the call and reports
	// whether it did (false: f ran or is running).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// realClock is package time. Inside a testing/synctest bubble it is the
// bubble's fake clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// ManualClock is a Clock that stands still until Advance moves it. Timers
// fire in Advance, in the goroutine that calls it, in the order they are
// due, each seeing Now at its own due time: a lease that ends halfway
// through an Advance hands the lock to the next waiter at that instant, and
// the new lease is measured from there. Time never goes backwards. It is
// safe for concurrent use.
type ManualClock struct {
	advancing sync.Mutex // one Advance at a time, so timers fire in order

	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer // pending, in no particular order
	seq    uint64         // creation order, to break ties between equal due times
}

type manualTimer struct {
	at  time.Time
	seq uint64
	f   func()
}

// NewClock returns a ManualClock that reads start until it is advanced.
func NewClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc calls f in the Advance that moves the clock to d from now or
// past it. A d of zero or less fires in the next Advance, Advance(0)
// included; never in AfterFunc itself.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{at: c.now.Add(max(d, 0)), seq: c.seq, f: f}
	c.seq++
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.timers, t)
		if i < 0 {
			return false
		}
		c.timers = slices.Delete(c.timers, i, i+1)
		return true
	}
}

// Advance moves the clock forward by d and fires every timer due by then,
// earliest first (equal times in the order they were set), including timers
// those set. Each runs with Now at its due time; when Advance returns, Now
// is the old time + d and everything due has happened: expired leases are
// lost, their names handed to the next waiters, wait limits passed. Waiters
// woken by it return from Acquire in their own goroutines, a moment later.
//
// Advance panics if d is negative. Calls from several goroutines run one
// after the other; a timer's function must not call Advance.
func (c *ManualClock) Advance(d time.Duration) {
	if d < 0 {
		panic("dlocktest: ManualClock.Advance with a negative duration")
	}
	c.advancing.Lock()
	defer c.advancing.Unlock()
	c.mu.Lock()
	target := c.now.Add(d)
	for {
		i := c.next(target)
		if i < 0 {
			c.now = target
			c.mu.Unlock()
			return
		}
		t := c.timers[i]
		c.timers = slices.Delete(c.timers, i, i+1)
		if t.at.After(c.now) {
			c.now = t.at
		}
		// Unlocked: f takes the Locker's mutex, which is held around
		// AfterFunc and stop, which take c.mu.
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
}

// next returns the index of the earliest timer due by target, or -1.
// c.mu must be held.
func (c *ManualClock) next(target time.Time) int {
	best := -1
	for i, t := range c.timers {
		if t.at.After(target) {
			continue
		}
		if best < 0 || t.at.Before(c.timers[best].at) || (t.at.Equal(c.timers[best].at) && t.seq < c.timers[best].seq) {
			best = i
		}
	}
	return best
}
