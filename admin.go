package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/inspect"
	"github.com/dlock-go/dlock/internal/node"
)

// List returns the locks held now whose name matches the glob pattern match
// ("" or "*" for all), at most limit of them (0 for no limit). It walks the
// keyspace with SCAN (never KEYS), on every primary of a Cluster, so it does
// not block Redis; on a big keyspace it takes a while.
func (c *Client) List(ctx context.Context, match string, limit int) ([]inspect.LockInfo, error) {
	if err := c.checkUsable(ctx); err != nil {
		return nil, opError("list", "", err)
	}
	if match == "" {
		match = "*"
	}
	// The glob stands in for the name: the patterns of the lock hashes and
	// of the semaphores' permits.
	pattern := node.KeysOf(c.cfg.prefix, match)
	var names, sems []string
	seen := map[string]bool{}
	scan := func(ctx context.Context, primary redis.UniversalClient) error {
		if limit > 0 && len(names)+len(sems) >= limit {
			// The primaries of a Cluster take turns: one whose turn
			// comes after the limit was reached adds nothing (each
			// added its first lock: List(limit 1) gave 3 on 3 primaries).
			return errEnough
		}
		it := primary.ScanType(ctx, 0, pattern.Lock, 1000, "hash").Iterator()
		for it.Next(ctx) {
			name, kind := c.parseKey(it.Val())
			if kind == node.KeyLock && !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
			if limit > 0 && len(names)+len(sems) >= limit {
				return errEnough
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
		// Semaphores: their permits zset, apart from the lock hashes.
		it = primary.ScanType(ctx, 0, pattern.Sem().Permits, 1000, "zset").Iterator()
		for it.Next(ctx) {
			name, kind := c.parseKey(it.Val())
			if kind == node.KeySem && !seen["\x00"+name] {
				seen["\x00"+name] = true
				sems = append(sems, name)
			}
			if limit > 0 && len(names)+len(sems) >= limit {
				return errEnough
			}
		}
		return it.Err()
	}
	var err error
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		// ForEachMaster calls fn on all primaries at once; mu makes the
		// scans take turns, since names, seen and the limit are shared.
		var mu sync.Mutex
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, node)
		})
	} else {
		err = scan(ctx, c.rdb)
	}
	if err != nil && !errors.Is(err, errEnough) {
		return nil, opError("list", "", fmt.Errorf("pattern %q: %w", match, redisError(err)))
	}
	infos := make([]inspect.LockInfo, 0, len(names))
	// One pipeline per batch of names rather than a round trip per lock.
	for batch := range slices.Chunk(names, 200) {
		got, err := c.inspect(ctx, batch)
		if err != nil {
			return nil, opError("list", "", fmt.Errorf("pattern %q: %w", match, err))
		}
		infos = append(infos, got...)
	}
	for batch := range slices.Chunk(sems, 200) {
		got, err := c.semInspect(ctx, batch)
		if err != nil {
			return nil, opError("list", "", fmt.Errorf("pattern %q: %w", match, err))
		}
		infos = append(infos, got...)
	}
	return infos, nil
}

var errEnough = errors.New("enough")

// parseKey tells which lock's key, under the client's prefix, key is and
// which of its keys (node.ParseKey).
func (c *Client) parseKey(key string) (string, node.KeyKind) { return node.ParseKey(c.cfg.prefix, key) }

// Inspect returns what Redis holds for the lock name, or ErrNotHeld.
func (c *Client) Inspect(ctx context.Context, name string) (inspect.LockInfo, error) {
	if err := checkName(name); err != nil {
		return inspect.LockInfo{}, opError("inspect", name, err)
	}
	if err := c.checkUsable(ctx); err != nil {
		return inspect.LockInfo{}, opError("inspect", name, err)
	}
	infos, err := c.inspect(ctx, []string{name})
	if err != nil {
		return inspect.LockInfo{}, opError("inspect", name, err)
	}
	if len(infos) == 0 {
		// Not an exclusive lock: a semaphore of that name?
		if infos, err = c.semInspect(ctx, []string{name}); err != nil {
			return inspect.LockInfo{}, opError("inspect", name, err)
		}
	}
	if len(infos) == 0 {
		return inspect.LockInfo{}, opError("inspect", name, fmt.Errorf("%w: nobody holds it", ErrNotHeld))
	}
	return infos[0], nil
}

// inspect reads the locks of names in one pipeline, leaving out those that
// are not held (released since a scan saw them).
func (c *Client) inspect(ctx context.Context, names []string) ([]inspect.LockInfo, error) {
	return c.readLocks(ctx, names, true)
}

// readLocks is inspect; without queue it leaves out the waiters' entries
// (inspect.LockInfo.Queue), two reads per lock that grow with the line, and counts
// them only.
func (c *Client) readLocks(ctx context.Context, names []string, queue bool) ([]inspect.LockInfo, error) {
	type reads struct {
		k       node.Keys
		h       *redis.MapStringStringCmd
		pttl    *redis.DurationCmd
		waiters *redis.IntCmd
		line    *redis.StringSliceCmd
		qdata   *redis.MapStringStringCmd
	}
	pipe := c.rdb.Pipeline()
	now := pipe.Time(ctx)
	rs := make([]reads, len(names))
	for i, name := range names {
		k := c.keys(name)
		rs[i] = reads{k: k, h: pipe.HGetAll(ctx, k.Lock), pttl: pipe.PTTL(ctx, k.Lock), waiters: pipe.ZCard(ctx, k.Queue)}
		if queue {
			rs[i].line, rs[i].qdata = pipe.ZRange(ctx, k.Queue, 0, maxQueueShown-1), pipe.HGetAll(ctx, k.QData)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, redisError(err)
	}
	var infos []inspect.LockInfo
	for i, r := range rs {
		f := r.h.Val()
		if f["token"] == "" {
			continue
		}
		fence, _ := strconv.ParseInt(f["fence"], 10, 64)
		since, _ := strconv.ParseInt(f["since"], 10, 64)
		lease, _ := strconv.ParseInt(f["ttl"], 10, 64)
		infos = append(infos, inspect.LockInfo{
			Name: names[i], Key: r.k.Lock, Owner: f["owner"], Token: f["token"], Fence: fence,
			Since: time.UnixMilli(since), Lease: time.Duration(lease) * time.Millisecond,
			TTL: r.pttl.Val(), Waiters: r.waiters.Val(), Kind: KindExclusive,
		})
		if queue {
			infos[len(infos)-1].Queue = queueOf(r.line.Val(), r.qdata.Val(), now.Val())
		}
		if f["token"] == node.ReadersMarker {
			sharedInfo(&infos[len(infos)-1], f, now.Val())
		}
	}
	return infos, nil
}

// ForceUnlock deletes the lock name if its token is still token, hands it to
// the next waiter as a release would, and returns what it removed. Taking the
// token the caller was shown (from Inspect or List) makes it a
// compare-and-delete: a lock that changed hands since is left alone
// (ErrNotHeld, with the new holder's inspect.LockInfo); a lock nobody holds gives
// ErrNotHeld and an empty inspect.LockInfo.
//
// A read lock (Kind KindShared) takes either a reader's token (from
// inspect.LockInfo.Readers), which drops that reader alone, or the lock's Token, a
// marker, which drops every reader at once.
//
// It breaks mutual exclusion if the holder is alive: the holder learns at its
// next renewal and its context is cancelled, but work it does until then
// overlaps with the next holder's. Use fencing where that matters.
//
// A semaphore's permit is force-unlocked by its own token (from
// inspect.LockInfo.Holders); the inspect.LockInfo returned is the semaphore's before.
//
// The token is marked forced on the node for forcedRecordTTL (a day): no
// later attempt of it takes the lock there again, so a redlock.Lock
// force-unlocked on a majority of its nodes, one node at a time, is lost at
// its next renewal instead of being taken again node by node.
func (c *Client) ForceUnlock(ctx context.Context, name, token string) (inspect.LockInfo, error) {
	if node.IsSem(token) {
		return c.forceUnlockPermit(ctx, name, token)
	}
	info, err := c.Inspect(ctx, name)
	if err != nil {
		// Nobody holds it: ErrNotHeld with an empty inspect.LockInfo, which tells
		// "released since" from "changed hands" (a inspect.LockInfo of the new
		// holder).
		return inspect.LockInfo{}, opError("force unlock", name, errors.Unwrap(err))
	}
	if info.Token != token && !readBy(info, token) {
		return info, opError("force unlock", name, ErrNotHeld)
	}
	// A forced record, not a release record: the holder's own Release, later,
	// must report ErrNotHeld rather than find the token released and report
	// success, and nothing may take the lock again for the token (a Redlock
	// renewal re-takes a node where its lock is missing: without the record
	// a Redlock forced node by node came back on every node).
	forced := node.ReleaseArgs{Record: forcedRecordTTL, Forced: true}
	if token == node.ReadersMarker {
		// Every reader gets its own forced record, and the marker one, so
		// that this command sent again reports success. The marker is
		// nobody's token: a short record, or a later forced unlock of the
		// marker on the same name would find it and report success.
		forced.Record = releaseRecordTTL
	}
	res, err := c.releaseWith(ctx, c.keys(name), token, forced)
	if err != nil {
		return info, opError("force unlock", name, redisError(err))
	}
	if res != 1 && res != 2 { // 2: this forced unlock ran before (a re-sent command)
		// Released or taken between Inspect and the script: report who
		// holds it now (an empty inspect.LockInfo when nobody does), not the
		// holder that was shown.
		cur, err := c.Inspect(ctx, name)
		if err != nil {
			cur = inspect.LockInfo{}
		}
		return cur, opError("force unlock", name, ErrNotHeld)
	}
	return info, nil
}
