package dlock

import (
	"sync"
	"time"
)

// localQueue lines up the goroutines of this process that wait for one
// name, in arrival order. Only the first talks to Redis; the others wait for
// their turn here, so a release never wakes a herd.
type localQueue struct {
	waiters []*localWaiter // guarded by Client.qmu

	mu     sync.Mutex
	holder time.Duration // the holder's lease at the last attempt
}

type localWaiter struct {
	turn chan struct{} // closed when this waiter is first in line
}

func (q *localQueue) setHolderTTL(d time.Duration) {
	q.mu.Lock()
	q.holder = d
	q.mu.Unlock()
}

func (q *localQueue) holderTTL() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.holder
}

// waitersOf reports whether goroutines of this process wait for name. A new
// Acquire must not overtake them.
func (c *Client) waitersOf(name string) bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return c.queues[name] != nil
}

func (c *Client) joinLocal(name string) (*localQueue, *localWaiter) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	q := c.queues[name]
	if q == nil {
		q = &localQueue{}
		c.queues[name] = q
	}
	w := &localWaiter{turn: make(chan struct{})}
	q.waiters = append(q.waiters, w)
	if len(q.waiters) == 1 {
		close(w.turn)
	}
	return q, w
}

// leaveLocal removes w, and gives the turn to the next waiter when w had it.
func (c *Client) leaveLocal(name string, q *localQueue, w *localWaiter) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	for i, x := range q.waiters {
		if x != w {
			continue
		}
		q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
		if i == 0 && len(q.waiters) > 0 {
			close(q.waiters[0].turn)
		}
		break
	}
	if len(q.waiters) == 0 {
		delete(c.queues, name)
	}
}
