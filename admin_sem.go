package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/inspect"
	"github.com/dlock-go/dlock/internal/node"
)

// semInspect reads the semaphores of names in one pipeline, leaving out
// those with no live permit.
func (c *Client) semInspect(ctx context.Context, names []string) ([]inspect.LockInfo, error) {
	return c.readSems(ctx, names, true)
}

// readSems is semInspect; without queue it counts the waiters without
// reading their entries, as readLocks.
func (c *Client) readSems(ctx context.Context, names []string, queue bool) ([]inspect.LockInfo, error) {
	type reads struct {
		k       node.SemKeys
		permits *redis.ZSliceCmd
		data    *redis.MapStringStringCmd
		queue   *redis.ZSliceCmd
		qdata   *redis.MapStringStringCmd
		waiters *redis.IntCmd // without queue
	}
	pipe := c.rdb.Pipeline()
	now := pipe.Time(ctx)
	rs := make([]reads, len(names))
	for i, name := range names {
		k := c.keys(name).Sem()
		rs[i] = reads{k: k, permits: pipe.ZRangeWithScores(ctx, k.Permits, 0, -1), data: pipe.HGetAll(ctx, k.Data)}
		if queue {
			rs[i].queue, rs[i].qdata = pipe.ZRangeWithScores(ctx, k.Queue, 0, -1), pipe.HGetAll(ctx, k.QData)
		} else {
			rs[i].waiters = pipe.ZCard(ctx, k.Queue)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, redisError(err)
	}
	nowMS := now.Val().UnixMilli()
	var infos []inspect.LockInfo
	for i, r := range rs {
		data := r.data.Val()
		n, _ := strconv.Atoi(data["n"])
		info := inspect.LockInfo{Name: names[i], Key: r.k.Permits, Kind: KindSemaphore, Permits: n}
		for _, z := range r.permits.Val() {
			token, _ := z.Member.(string)
			left := int64(z.Score) - nowMS
			if left <= 0 {
				continue // expired: the next script purges it
			}
			p := inspect.PermitInfo{Token: token, TTL: time.Duration(left) * time.Millisecond}
			if parts := strings.SplitN(data[token], "|", 4); len(parts) == 4 {
				p.Fence, _ = strconv.ParseInt(parts[0], 10, 64)
				since, _ := strconv.ParseInt(parts[1], 10, 64)
				lease, _ := strconv.ParseInt(parts[2], 10, 64)
				p.Since, p.Lease, p.Owner = time.UnixMilli(since), time.Duration(lease)*time.Millisecond, parts[3]
			}
			info.Holders = append(info.Holders, p)
		}
		if len(info.Holders) == 0 {
			continue
		}
		summarize(&info)
		if queue {
			info.Queue = waitersOf(r.queue.Val(), r.qdata.Val(), nowMS, 4)
			info.Waiters = int64(len(r.queue.Val()))
		} else {
			info.Waiters = r.waiters.Val()
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// summarize fills a semaphore's inspect.LockInfo fields that describe one holder
// for an exclusive lock: the earliest grant (Since), the latest fence, and
// the time until the first permit comes back (TTL), as a busy Acquire
// reports it. Owner tells how many of the permits are held.
func summarize(info *inspect.LockInfo) {
	first := info.Holders[0] // ZRANGE: earliest lease end first
	info.TTL = first.TTL
	info.Since = first.Since
	for _, p := range info.Holders {
		info.Fence = max(info.Fence, p.Fence)
		if p.Since.Before(info.Since) {
			info.Since = p.Since
		}
	}
	info.Owner = fmt.Sprintf("%d/%d permits", len(info.Holders), info.Permits)
}

// waitersOf reads a semaphore's waiter queue and its data, as queueOf
// does a lock's: fields is the number of '|'-separated fields before the
// owner (4 for a semaphore's entries, which carry n). Entries no longer
// alive at nowMS are left out, as a hand-off skips them.
func waitersOf(queue []redis.Z, qdata map[string]string, nowMS int64, fields int) []inspect.WaiterInfo {
	var out []inspect.WaiterInfo
	for _, z := range queue {
		token, _ := z.Member.(string)
		parts := strings.SplitN(qdata[token], "|", fields+1)
		if len(parts) != fields+1 {
			continue
		}
		alive, _ := strconv.ParseInt(parts[2], 10, 64)
		if alive < nowMS {
			continue
		}
		out = append(out, inspect.WaiterInfo{Owner: parts[fields], Token: token,
			Alive: (time.Duration(alive-nowMS) * time.Millisecond)})
		if len(out) == maxQueueShown {
			break
		}
	}
	return out
}

// forceUnlockPermit is ForceUnlock of one permit of a semaphore.
func (c *Client) forceUnlockPermit(ctx context.Context, name, token string) (inspect.LockInfo, error) {
	err := checkName(name)
	if err == nil {
		err = c.checkUsable(ctx)
	}
	if err != nil {
		return inspect.LockInfo{}, opError("force unlock", name, err)
	}
	infos, err := c.semInspect(ctx, []string{name})
	if err != nil {
		return inspect.LockInfo{}, opError("force unlock", name, err)
	}
	var info inspect.LockInfo
	if len(infos) > 0 {
		info = infos[0]
	}
	// As ForceUnlock of a lock: a token that holds no live permit now is
	// refused before anything is sent (run twice, the second finds none).
	// The script's own "ran before" (2) is then a copy of this command that
	// go-redis sent again, and reports success.
	if !slices.ContainsFunc(info.Holders, func(p inspect.PermitInfo) bool { return p.Token == token }) {
		return info, opError("force unlock", name, fmt.Errorf("%w: no live permit has that token", ErrNotHeld))
	}
	// A forced record, as ForceUnlock writes: nothing takes a permit again
	// for the token, and a re-sent forced unlock reports success (2).
	res, err := c.releaseWith(ctx, c.keys(name), token, node.ReleaseArgs{Record: forcedRecordTTL, Forced: true})
	if err != nil {
		return info, opError("force unlock", name, redisError(err))
	}
	if res != 1 && res != 2 {
		return info, opError("force unlock", name, fmt.Errorf("%w: no live permit has that token", ErrNotHeld))
	}
	return info, nil
}
