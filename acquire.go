package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
)

// TryAcquire makes one attempt to take the lock name. When another holder
// has it, the error matches ErrNotObtained and is a *NotObtainedError that
// tells the holder's remaining lease.
//
// The attempt is one round trip: one script checks, writes the lock hash with
// its TTL and hands out the next fencing token atomically.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	ac, err := c.acquireConfig(name, opts)
	if err != nil {
		return nil, opError("acquire", name, err)
	}
	if err := c.checkUsable(ctx); err != nil {
		return nil, opError("acquire", name, err)
	}
	l, err := c.attempt(ctx, name, ac)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// acquireConfig validates the name and options before anything is sent.
func (c *Client) acquireConfig(name string, opts []AcquireOption) (acquireConfig, error) {
	ac := acquireConfig{ttl: c.cfg.defaultTTL}
	for _, o := range opts {
		o.applyAcquire(&ac)
	}
	if err := checkName(name); err != nil {
		return ac, err
	}
	if err := c.cfg.checkTTL(ac.ttl); err != nil {
		return ac, err
	}
	ac.ttl = ac.ttl.Truncate(time.Millisecond)
	return ac, nil
}

// attempt runs the acquire script once. The reply is {1, fence} when the lock
// is ours, {0, pttl} when someone else holds it.
func (c *Client) attempt(ctx context.Context, name string, ac acquireConfig) (*Lock, error) {
	k := c.keys(name)
	token := newToken()
	sent := time.Now()
	res, err := scripts.Acquire.Run(ctx, c.rdb, []string{k.lock, k.fence}, token, ms(ac.ttl), c.cfg.owner).Int64Slice()
	if err != nil {
		return nil, opError("acquire", name, redisError(err))
	}
	if len(res) != 2 {
		return nil, opError("acquire", name, fmt.Errorf("unexpected reply %v", res))
	}
	if res[0] == 0 {
		return nil, &NotObtainedError{Name: name, HolderTTL: time.Duration(res[1]) * time.Millisecond}
	}
	return c.newLock(name, k, token, res[1], ac.ttl, sent), nil
}
