package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/inspect"
	"github.com/dlock-go/dlock/internal/node"
)

// scanCount is SCAN's COUNT per call, as List's.
const scanCount = 1000

// Scan walks the locks held now, as List does, in bounded steps for
// callers that must not wait on a big keyspace: a metrics scrape, a health
// check. fn is called with each batch of held locks read (at most 200, as
// complete as List's), in the caller's goroutine; fn may be nil to count
// only.
//
// The walk stops at the end of the keyspace, when opts.MaxKeys is spent
// (Truncated, no error), or when ctx ends: then Truncated is set and the
// error wraps ctx's, after fn has had the locks read before. A lock may be
// missed or seen twice if it changes while the walk goes on (SCAN's own
// guarantee: a key present for the whole walk is returned at least once;
// Scan hands it to fn once).
//
// With a Cluster, the primaries are walked one after another and share the
// budget. Ages (inspect.LockInfo.Since) are on the Redis server's clock.
func (c *Client) Scan(ctx context.Context, opts inspect.ScanOptions, fn func([]inspect.LockInfo)) (inspect.ScanStats, error) {
	if opts.MaxKeys < 0 {
		return inspect.ScanStats{}, opError("scan", "", fmt.Errorf("%w: inspect.ScanOptions.MaxKeys %d is below 0", ErrInvalidOption, opts.MaxKeys))
	}
	if err := c.checkUsable(ctx); err != nil {
		return inspect.ScanStats{}, opError("scan", "", err)
	}
	match := opts.Match
	if match == "" {
		match = "*"
	}
	// One pass over every key of the names that match, whatever its type,
	// rather than List's two passes filtered by type: under a budget, a
	// second pass would look at every key twice. The keys that are not a
	// lock's hash or a semaphore's permits are dropped here.
	now, err := c.rdb.Time(ctx).Result()
	if err != nil {
		return inspect.ScanStats{}, opError("scan", "", redisError(err))
	}
	w := scanWalk{c: c, ctx: ctx, opts: opts, fn: fn, pattern: node.Match(c.cfg.prefix, match), seen: map[string]bool{}}
	w.st.Now = now
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		// ForEachMaster calls fn on all primaries at once; mu makes the
		// walks take turns, since the budget and seen are shared.
		var mu sync.Mutex
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return w.node(node)
		})
	} else {
		err = w.node(c.rdb)
	}
	if err == nil {
		err = w.flush()
	}
	if errors.Is(err, errEnough) {
		w.st.Truncated, err = true, w.flush()
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			w.st.Truncated = true
			// go-redis may report a deadline as a network timeout:
			// keep ctx's error matchable either way.
			if !errors.Is(err, cerr) {
				err = errors.Join(err, cerr)
			}
		}
		return w.st, opError("scan", "", fmt.Errorf("pattern %q: %w", match, redisError(err)))
	}
	return w.st, nil
}

// scanWalk is one Scan: the budget spent so far and the names waiting to be
// read.
type scanWalk struct {
	c       *Client
	ctx     context.Context
	opts    inspect.ScanOptions
	fn      func([]inspect.LockInfo)
	pattern string
	st      inspect.ScanStats
	seen    map[string]bool // keys already taken: SCAN may return one twice
	names   []string        // lock hashes to read
	sems    []string        // semaphores to read
}

// node walks one primary until its keyspace ends or the budget does
// (errEnough).
func (w *scanWalk) node(primary redis.UniversalClient) error {
	var cursor uint64
	for {
		// go-redis does not always stop on a deadline (it keeps its own
		// read timeout unless made with ContextTimeoutEnabled): check
		// between calls, so a scan bounded by ctx overruns by one call
		// at most.
		if err := w.ctx.Err(); err != nil {
			return err
		}
		count := scanCount
		if w.opts.MaxKeys > 0 {
			left := w.opts.MaxKeys - w.st.Examined
			if left <= 0 {
				return errEnough
			}
			count = min(count, left)
		}
		keys, next, err := primary.Scan(w.ctx, cursor, w.pattern, int64(count)).Result()
		if err != nil {
			return err
		}
		w.st.Calls++
		w.st.Examined += count
		w.st.Keys += len(keys)
		for _, key := range keys {
			if w.seen[key] {
				continue
			}
			w.seen[key] = true
			switch name, kind := w.c.parseKey(key); kind {
			case node.KeyLock:
				w.names = append(w.names, name)
			case node.KeySem:
				w.sems = append(w.sems, name)
			}
		}
		if len(w.names)+len(w.sems) >= 200 {
			if err := w.flush(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// flush reads the names gathered so far, in pipelines of up to 200 names,
// and hands the held ones of each to fn.
func (w *scanWalk) flush() error {
	queue := !w.opts.Brief
	for _, batch := range []struct {
		read  func(context.Context, []string) ([]inspect.LockInfo, error)
		names []string
	}{
		{func(ctx context.Context, names []string) ([]inspect.LockInfo, error) {
			return w.c.readLocks(ctx, names, queue)
		}, w.names},
		{func(ctx context.Context, names []string) ([]inspect.LockInfo, error) {
			return w.c.readSems(ctx, names, queue)
		}, w.sems},
	} {
		for names := range slices.Chunk(batch.names, 200) {
			infos, err := readBatch(w.ctx, batch.read, names)
			if err != nil {
				return err
			}
			if len(infos) > 0 {
				w.st.Locks += len(infos)
				if w.fn != nil {
					w.fn(infos)
				}
			}
		}
	}
	w.names, w.sems = w.names[:0], w.sems[:0]
	return nil
}

// readBatch reads names with read (inspect or semInspect) in one pipeline.
// A key of another type under the prefix (SCAN has no TYPE filter here, see
// Scan) fails the whole pipeline with WRONGTYPE: then the names are read one
// by one and that key is left out, as List leaves it out.
func readBatch(ctx context.Context, read func(context.Context, []string) ([]inspect.LockInfo, error), names []string) ([]inspect.LockInfo, error) {
	if len(names) == 0 {
		return nil, nil
	}
	infos, err := read(ctx, names)
	if !errors.Is(err, ErrWrongType) {
		return infos, err
	}
	infos = infos[:0]
	for _, name := range names {
		got, err := read(ctx, []string{name})
		if errors.Is(err, ErrWrongType) {
			continue
		}
		if err != nil {
			return nil, err
		}
		infos = append(infos, got...)
	}
	return infos, nil
}
