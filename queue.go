package dlock

import "sync"

// localQueue counts the goroutines of this process that wait for one name.
// Each waits in the Redis queue with its own token (see waiter); the count
// is for a new Acquire, which must not overtake them (waitersOf).
type localQueue struct {
	waiters int // guarded by Client.qmu
	// placed counts the waiters whose queued attempt Redis answered: they
	// have their place in line. Guarded by Client.qmu.
	placed int

	mu     sync.Mutex
	holder busyInfo // who held it at the last busy attempt
}

func (q *localQueue) setHolder(b busyInfo) {
	q.mu.Lock()
	q.holder = b
	q.mu.Unlock()
}

func (q *localQueue) lastHolder() busyInfo {
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

// joinWaiters counts a waiter of name.
func (c *Client) joinWaiters(name string) *localQueue {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	q := c.queues[name]
	if q == nil {
		q = &localQueue{}
		c.queues[name] = q
	}
	q.waiters++
	return q
}

// place counts (d = 1) or uncounts (d = -1) a waiter with its place in the
// Redis queue.
func (c *Client) place(q *localQueue, d int) {
	c.qmu.Lock()
	q.placed += d
	c.qmu.Unlock()
}

// leaveWaiters undoes joinWaiters.
func (c *Client) leaveWaiters(name string, q *localQueue) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	q.waiters--
	if q.waiters == 0 && c.queues[name] == q {
		delete(c.queues, name)
	}
}
