package dlock_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestEvictionBreaksMutualExclusion shows the hazard the server check warns
// about: on a Redis that evicts keys with a TTL (volatile-lru, the default
// of several managed services), cache writes evict a held lock, and a second
// client takes it while the first holder's context is still live. Only the
// fence, whose counter has no TTL and so survives volatile-* eviction, still
// tells the two holders apart.
func TestEvictionBreaksMutualExclusion(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "3mb", "--maxmemory-policy", "volatile-lru")
	rdb := srv.Client(t)
	first, second := newLocker(t, rdb), newLocker(t, srv.Client(t))
	// Renewal on; the first renewal comes at a third of the TTL, long after
	// the test is over, so nothing but eviction touches the lock.
	held := mustAcquire(t, first, "evicted", dlock.WithTTL(30*time.Second))

	// Redis dates keys for LRU in whole seconds: once a second has passed,
	// every cache key is younger than the lock, which is then the first
	// volatile key evicted as soon as eviction samples it. Without the
	// pause the keys tie and the lock goes by chance: after up to 6 MB of
	// writes in ten runs here, against under 3 MB in 25 runs with it.
	time.Sleep(1200 * time.Millisecond)
	value := strings.Repeat("v", 64<<10)
	const maxWrites = 160 // 10 MB
	writes := 0
	for ; writes < maxWrites; writes++ {
		key := "cache:" + strconv.Itoa(writes)
		if err := rdb.Do(bg, "SET", key, value, "PX", 60_000).Err(); err != nil {
			t.Fatal(err)
		}
		// EXISTS does not touch the key's LRU clock.
		if rdb.Exists(bg, "dlock:{evicted}").Val() == 0 {
			break
		}
	}
	if writes == maxWrites {
		t.Fatalf("the lock survived %d MB of cache writes", maxWrites*len(value)>>20)
	}
	info := rdb.Info(bg, "stats").Val()
	if !strings.Contains(info, "evicted_keys:") || strings.Contains(info, "evicted_keys:0\r") {
		t.Fatalf("the lock key is gone but Redis evicted nothing:\n%s", info)
	}
	t.Logf("lock evicted after %d KB of cache writes", (writes+1)*len(value)>>10)

	taken, err := second.TryAcquire(bg, "evicted", dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("second client: %v; eviction should have freed the lock", err)
	}
	if err := held.Context().Err(); err != nil {
		t.Fatalf("the first holder already knows it lost the lock (%v): the hazard is that it does not", err)
	}
	// Two live holders of one lock. The fences differ, so a resource that
	// checks them refuses the first holder's late writes.
	if taken.Fence() <= held.Fence() {
		t.Fatalf("second holder's fence %d is not above the first's %d", taken.Fence(), held.Fence())
	}
	if err := taken.Release(bg); err != nil {
		t.Fatal(err)
	}
}

// With noeviction, the setting docs/requirements.md asks for, a full Redis
// keeps the lock it holds (renewed, then released) and refuses new locks
// with ErrUnavailable, naming the OOM: the failure to want, instead of a
// second holder.
func TestNoEvictionRefusesNewLocksWhenFull(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
	rdb := srv.Client(t)
	c := newLocker(t, rdb)
	held := mustAcquire(t, c, "kept", dlock.WithTTL(time.Second))
	// Large values first, then small ones: a large SET is refused while
	// its own query buffer counts, leaving room for small writes.
	full := false
	for _, size := range []int{64 << 10, 1 << 10, 64} {
		value := strings.Repeat("v", size)
		full = false
		for i := 0; i < 20000 && !full; i++ { // 10 MB at most of each
			err := rdb.Do(bg, "SET", "cache:"+strconv.Itoa(size)+":"+strconv.Itoa(i), value).Err()
			full = err != nil && strings.HasPrefix(err.Error(), "OOM")
			if i*size > 10<<20 {
				break
			}
		}
	}
	if !full {
		t.Fatal("Redis took 10 MB of writes under maxmemory 3mb")
	}
	_, err := c.TryAcquire(bg, "new")
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("TryAcquire on a full noeviction Redis: %v; want ErrUnavailable naming the OOM", err)
	}
	// Renewals go on: PEXPIRE does not need memory. Three TTLs.
	time.Sleep(3 * time.Second)
	if rdb.Exists(bg, "dlock:{kept}").Val() != 1 || held.Context().Err() != nil {
		t.Errorf("the held lock did not survive: key %d, context %v", rdb.Exists(bg, "dlock:{kept}").Val(), held.Context().Err())
	}
	if err := held.Release(bg); err != nil {
		t.Errorf("Release on a full Redis: %v", err)
	}
}
