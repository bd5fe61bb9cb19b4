package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/node"
)

// raiseScript is raise_fence.lua: it writes a lock's fence into a node's
// fence counter while the node holds the lock.
//
//go:embed raise_fence.lua
var raiseSource string

var raiseScript = redis.NewScript(raiseSource)

// raiseFence is the second round of an acquisition that a quorum granted,
// and what makes Fence grow across holders. The lock's Fence is the largest
// of its nodes' fences; it is written into the fence counter of the nodes
// that granted, while they hold the lock, until a quorum of them has it (a
// node whose own fence is that largest has it already). Any later holder's
// quorum shares a node with that quorum, and was granted there after this
// lock let it go: its fence there, hence its Fence, is larger. Without this
// round, the nodes' fences are not comparable (each node's counter is seeded
// by its own clock), and the next holder's Fence is smaller when the node
// that gave the largest runs ahead and is not in the next quorum.
//
// It returns the fence, and an error unless a quorum confirmed before ctx
// or actx ended; the writes still out go on, on actx, in the background.
func (r *Redlock) raiseFence(ctx, actx context.Context, k node.Keys, token string, fences []int64) (int64, error) {
	var fence int64
	for _, f := range fences {
		fence = max(fence, f)
	}
	have, need := 0, 0
	results := make(chan error, len(fences))
	for i, f := range fences {
		switch {
		case f == 0:
			continue
		case f == fence:
			have++ // its counter is the fence already
			continue
		}
		need++
		if !r.start(func() {
			ok, err := raiseScript.Run(actx, r.nodes[i].rdb, []string{k.Lock, k.Fence}, token,
				fence, r.cfg.fenceLifetime.Milliseconds()).Bool()
			switch {
			case err != nil:
				err = fmt.Errorf("node %d: %w", i, redisError(err))
			case !ok:
				err = fmt.Errorf("node %d no longer holds the lock", i)
			}
			results <- err
		}) {
			results <- fmt.Errorf("node %d: %w", i, dlock.ErrClosed)
		}
	}
	var errs []error
	for have < r.quorum && need > 0 {
		select {
		case err := <-results:
			need--
			if err != nil {
				errs = append(errs, err)
			} else {
				have++
			}
		case <-ctx.Done():
			return fence, ctx.Err()
		case <-actx.Done():
			return fence, errFenceLate
		}
	}
	if have < r.quorum {
		err := fmt.Errorf("%w: the fence reached %d of %d nodes, %d needed", ErrNoQuorum, have, len(r.nodes), r.quorum)
		if len(errs) > 0 {
			err = fmt.Errorf("%w: %w", err, errors.Join(errs...))
		}
		return fence, err
	}
	return fence, nil
}

// errFenceLate is the failure of an attempt whose validity ran out while
// its fence was written: nodes slow or gone for a moment (a node killed or
// stopped mid-round), which the next attempt may not meet. A wait rides it
// out as an outage (isOutage); it matches ErrNoQuorum.
var errFenceLate error = fenceLateError{}

type fenceLateError struct{}

func (fenceLateError) Error() string {
	return ErrNoQuorum.Error() + ": the validity ran out while the fence was written"
}

func (fenceLateError) Is(target error) bool { return target == ErrNoQuorum }
