package dlock

import (
	"sync"
	"time"
)

// localQueue lines up the goroutines of this process that wait for one
// name, in arrival order. Only the first talks to Redis; the others wait for
// their turn here, so a release never wakes a herd.
type localQueue struct {
	// turns has one channel per waiting goroutine, in arrival order,
	// closed when that goroutine is first in line. Guarded by Client.qmu.
	turns []chan struct{}
	// readers counts the waiting readers, which take no turn (see
	// joinShared). Guarded by Client.qmu.
	readers int

	mu     sync.Mutex
	holder time.Duration // the holder's lease at the last attempt
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

// joinLocal lines the calling goroutine up for name: the returned turn is
// closed when it is first in line.
func (c *Client) joinLocal(name string) (q *localQueue, turn chan struct{}) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	q = c.queues[name]
	if q == nil {
		q = &localQueue{}
		c.queues[name] = q
	}
	turn = make(chan struct{})
	q.turns = append(q.turns, turn)
	if len(q.turns) == 1 {
		close(turn)
	}
	return q, turn
}

// leaveLocal takes turn out of the line, and gives the turn to the next
// waiter when turn had it.
func (c *Client) leaveLocal(name string, q *localQueue, turn chan struct{}) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	for i, t := range q.turns {
		if t != turn {
			continue
		}
		q.turns = append(q.turns[:i], q.turns[i+1:]...)
		if i == 0 && len(q.turns) > 0 {
			close(q.turns[0])
		}
		break
	}
	if len(q.turns) == 0 && q.readers == 0 {
		delete(c.queues, name)
	}
}

// joinShared counts a waiting reader of name: readers take no turn, each
// waits in the Redis queue with its own token, but a new Acquire of name
// must still see that this process waits for it (waitersOf).
func (c *Client) joinShared(name string) *localQueue {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	q := c.queues[name]
	if q == nil {
		q = &localQueue{}
		c.queues[name] = q
	}
	q.readers++
	return q
}

// leaveShared undoes joinShared.
func (c *Client) leaveShared(name string, q *localQueue) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	q.readers--
	if len(q.turns) == 0 && q.readers == 0 && c.queues[name] == q {
		delete(c.queues, name)
	}
}
