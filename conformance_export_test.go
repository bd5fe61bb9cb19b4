package dlock

import "time"

// LocalWaiters returns how many goroutines of this process wait in
// c.Acquire for name with their place in the Redis queue (a queued attempt
// answered): the order they are handed the lock in is set. The conformance suite
// uses it (Harness.Waiters) to know a waiter is in line before it releases
// or cancels, instead of sleeping and hoping.
func LocalWaiters(c *Client, name string) int {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if q := c.queues[name]; q != nil {
		return q.placed
	}
	return 0
}

// QueuedCalls returns how many of c's lock calls wait to leave in a batch
// (WithBatchDepth).
func QueuedCalls(c *Client) int { return c.batch.Queued() }

// HoldBatches has c's queued lock calls wait for a round trip however long
// it is out, for a test that holds one for as long as its calls take to
// queue (they would go alone after the stall bound otherwise).
func HoldBatches(c *Client) { c.batch.SetStallBound(time.Hour) }

// InFlight returns how many acquisitions of c are under way: Close waits
// for them.
func InFlight(c *Client) int {
	return c.own.Busy()
}

// ServerChecked reports whether c's one-time check of the server is done.
func ServerChecked(c *Client) bool { return c.server.verdict.Load() != nil }

// HoldBackDeadline stops l's deadline timer, as a scheduler that does not
// run the timer's goroutine in time (GC, CPU starvation, a stopped
// process) holds it back: the lease deadline is then found only by the
// next Context call, or a renewal's answer.
func HoldBackDeadline(l Lock) {
	if h, ok := l.(*reentrantLock); ok {
		l = h.r.lock
	}
	rl := l.(*redisLock)
	rl.mu.Lock()
	rl.life.Disarm()
	rl.mu.Unlock()
}
