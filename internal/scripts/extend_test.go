package scripts

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// extend (common.lua) takes one path on servers with
// redis.REDIS_VERSION_NUM (Redis 7.0 on, Valkey: PEXPIRE GT) and another
// before (PTTL, then PEXPIRE). The test servers all take the first; the
// second is run here by linking the scripts with that field read as nil,
// and both must keep what extend promises, through a Refresh and through
// an acquire of a lock that is ours already (a re-sent attempt): the lease
// only moves forward, a key that lost its expiry gets one back, the ttl
// field records the lease asked for, and the call always writes (a WAIT or
// WAITAOF after it covers the writes before it).
func TestExtendKeepsItsPromisesOnEveryServerPath(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, path := range serverPaths(t, commonSrc, Acquire, acquireSrc, Refresh, refreshSrc) {
		for _, via := range []string{"refresh", "acquire"} {
			t.Run(path.name+"/"+via, func(t *testing.T) {
				key := "x:{" + path.name + via + "}"
				extend := func(ttl string) {
					t.Helper()
					var err error
					if via == "refresh" {
						err = path.refresh.Run(ctx, rdb, []string{key}, "tok", ttl).Err()
					} else {
						_, err = acquireLock(ctx, rdb, path.acquire, key, "tok", ttl)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				rdb.HSet(ctx, key, "token", "tok", "fence", "1", "owner", "o", "since", "0", "ttl", "10000")
				rdb.PExpire(ctx, key, 10*time.Second)

				extend("1000") // shorter: the 10 s lease stays, the field says 1000
				if left := rdb.PTTL(ctx, key).Val().Milliseconds(); left < 5000 {
					t.Fatalf("a 1 s extend of a 10 s lease left %d ms", left)
				}
				if f := rdb.HGet(ctx, key, "ttl").Val(); f != "1000" {
					t.Fatalf("ttl field %q, want 1000", f)
				}
				extend("30000") // longer: moves
				if left := rdb.PTTL(ctx, key).Val().Milliseconds(); left < 20000 {
					t.Fatalf("a 30 s extend left %d ms", left)
				}
				if f := rdb.HGet(ctx, key, "ttl").Val(); f != "30000" {
					t.Fatalf("ttl field %q, want 30000", f)
				}
				rdb.PExpire(ctx, key, time.Minute)
				before := dirty(t, rdb)
				extend("30000") // same ttl, a longer lease in Redis: moves nothing
				if after := dirty(t, rdb); after == before {
					t.Fatal("an extend that moved nothing wrote nothing")
				}
				rdb.Persist(ctx, key)
				extend("30000")
				if left := rdb.PTTL(ctx, key).Val(); left <= 0 {
					t.Fatalf("a key without expiry got none back (PTTL %v)", left)
				}
			})
		}
	}
}

// serverPath is a kind's acquire and refresh scripts as one kind of
// server runs them.
type serverPath struct {
	name             string
	acquire, refresh *redis.Script
}

// serverPaths returns the scripts as linked (the path of Redis 7.0 on and
// Valkey: GT, then NX) and linked from lib with the server's version field
// read as nil (the path before 7.0: PTTL, then PEXPIRE), failing when the
// code does not read that field (the variant would be the script itself).
func serverPaths(t *testing.T, lib string, acquire *redis.Script, acquireBody string, refresh *redis.Script, refreshBody string) []serverPath {
	t.Helper()
	const field = "redis.REDIS_VERSION_NUM"
	if !strings.Contains(stripComments(lib), field) {
		t.Fatalf("common.lua's code no longer reads %s", field)
	}
	old := strings.ReplaceAll(lib, field, "nil --[[ "+field+" before 7.0 ]]")
	return []serverPath{
		{"GT then NX", acquire, refresh},
		{"PTTL then PEXPIRE", redis.NewScript(link(old, acquireBody)), redis.NewScript(link(old, refreshBody))},
	}
}

// acquireLock runs an acquire script of the lock's hash (acquire.lua or
// acquire_shared.lua: the same keys and arguments) for token on the name
// whose lock key is k, as a single attempt that does not queue.
func acquireLock(ctx context.Context, rdb *redis.Client, s *redis.Script, k, token, ttl string) ([]any, error) {
	return s.Run(ctx, rdb, []string{k, k + ":fence", k + ":q", k + ":qd", k + ":r:" + token, k + ":sem", k + ":sem:d"},
		token, ttl, "owner", "", "0", "0", "60000", "0").Slice()
}

// A semaphore's two keys (the permits zset and their data) live at least
// as long as every permit's lease in them, on both paths of outlive: the
// first permit gives the keys, made by the script, an expiry; a longer
// lease moves it; a shorter one (another permit's, or a Refresh) does not
// shorten it.
func TestSemaphoreKeysOutliveTheirPermitsOnEveryServerPath(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, path := range serverPaths(t, commonSrc+semCommonSrc, SemAcquire, semAcquireSrc, SemRefresh, semRefreshSrc) {
		t.Run(path.name, func(t *testing.T) {
			k := "s:{" + path.name + "}"
			sem, data := k+":sem", k+":sem:d"
			acquire := func(token, ttl string) {
				t.Helper()
				res, err := path.acquire.Run(ctx, rdb, []string{sem, data, k + ":fence", k + ":q", k + ":qd", k + ":r:" + token, k},
					token, ttl, "owner", "", "0", "0", "60000", "3", k+":w:", "0").Slice()
				if err != nil || len(res) < 1 || res[0] != int64(1) {
					t.Fatalf("acquire %s: %v, %v", token, res, err)
				}
			}
			refresh := func(token, ttl string) {
				t.Helper()
				if n, err := path.refresh.Run(ctx, rdb, []string{sem, data}, token, ttl).Int64(); err != nil || n != 1 {
					t.Fatalf("refresh %s: %v, %v", token, n, err)
				}
			}
			// Both keys live at least until the last permit's lease ends.
			outlives := func(what string) {
				t.Helper()
				last := rdb.ZRangeWithScores(ctx, sem, -1, -1).Val()
				if len(last) != 1 {
					t.Fatalf("%s: no permit in the zset", what)
				}
				now := rdb.Time(ctx).Val().UnixMilli()
				for _, key := range []string{sem, data} {
					left := rdb.PTTL(ctx, key).Val().Milliseconds()
					if left <= 0 || now+left < int64(last[0].Score)-5 {
						t.Fatalf("%s: %s lives %d ms, the last permit's lease ends in %d ms", what, key, left, int64(last[0].Score)-now)
					}
				}
			}
			acquire("a", "20000")
			outlives("first permit")
			acquire("b", "5000")
			outlives("a shorter permit beside it")
			refresh("a", "2000")
			outlives("a shorter Refresh")
			refresh("b", "40000")
			outlives("a longer Refresh")
			if left := rdb.PTTL(ctx, sem).Val(); left < 30*time.Second {
				t.Fatalf("after a 40 s Refresh the zset lives %v", left)
			}
		})
	}
}

// dirty is the server's count of writes since its last save.
func dirty(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info := rdb.Info(context.Background(), "persistence").Val()
	_, v, _ := strings.Cut(info, "rdb_changes_since_last_save:")
	n, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(v, "\n", 2)[0]), 10, 64)
	if err != nil {
		t.Fatalf("rdb_changes_since_last_save: %v", err)
	}
	return n
}

// A read lock's hash lives at least as long as every reader's lease in it,
// on both paths of live_until: the first reader gives the key, made by the
// script, an expiry; a second reader's shorter lease and a shorter Refresh
// leave it; a longer Refresh moves it; a key someone PERSISTed gets one
// back.
func TestReadLockOutlivesItsReadersOnEveryServerPath(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, path := range serverPaths(t, commonSrc, AcquireShared, acquireSharedSrc, RefreshShared, refreshSharedSrc) {
		t.Run(path.name, func(t *testing.T) {
			k := "r:{" + path.name + "}"
			acquire := func(token, ttl string) {
				t.Helper()
				res, err := acquireLock(ctx, rdb, path.acquire, k, token, ttl)
				if err != nil || len(res) < 1 || res[0] != int64(1) {
					t.Fatalf("acquire %s: %v, %v", token, res, err)
				}
			}
			refresh := func(token, ttl string) {
				t.Helper()
				if n, err := path.refresh.Run(ctx, rdb, []string{k}, token, ttl).Int64(); err != nil || n != 1 {
					t.Fatalf("refresh %s: %v, %v", token, n, err)
				}
			}
			lives := func(what string, atLeast time.Duration) {
				t.Helper()
				if left := rdb.PTTL(ctx, k).Val(); left < atLeast-5*time.Millisecond {
					t.Fatalf("%s: the read lock's key lives %v, want at least %v", what, left, atLeast)
				}
			}
			acquire("Ra", "20000")
			lives("first reader", 19*time.Second)
			acquire("Rb", "5000")
			lives("a shorter reader beside it", 19*time.Second)
			refresh("Ra", "2000")
			lives("a shorter Refresh", 18*time.Second)
			refresh("Rb", "40000")
			lives("a longer Refresh", 39*time.Second)
			refresh("Ra", "5000") // Ra's lease (20 s) is now below the key's
			lives("a Refresh of a reader whose lease ends first", 39*time.Second)
			rdb.Persist(ctx, k)
			refresh("Rb", "40000")
			if left := rdb.PTTL(ctx, k).Val(); left <= 0 {
				t.Fatalf("a read lock's key without expiry got none back (PTTL %v)", left)
			}
		})
	}
}
