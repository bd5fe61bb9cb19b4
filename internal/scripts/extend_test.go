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
	const oldServer = "nil --[[ redis.REDIS_VERSION_NUM before 7.0 ]]"
	for _, path := range []struct {
		name             string
		refresh, acquire *redis.Script
	}{
		{"PEXPIRE GT", Refresh, Acquire},
		{"PTTL then PEXPIRE", variant(t, refreshSrc, oldServer), variant(t, acquireSrc, oldServer)},
	} {
		for _, via := range []string{"refresh", "acquire"} {
			t.Run(path.name+"/"+via, func(t *testing.T) {
				key := "x:{" + path.name + via + "}"
				extend := func(ttl string) {
					t.Helper()
					var err error
					if via == "refresh" {
						err = path.refresh.Run(ctx, rdb, []string{key}, "tok", ttl).Err()
					} else {
						err = path.acquire.Run(ctx, rdb, []string{key, key + ":fence", key + ":q", key + ":qd", key + ":r:tok", key + ":sem", key + ":semd"},
							"tok", ttl, "owner", "", "0", "0", "60000", "0").Err()
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

// variant links body with common.lua where the text old is replaced by
// repl, failing when old is not there (the variant would be the script).
func variant(t *testing.T, body, repl string) *redis.Script {
	t.Helper()
	const old = "redis.REDIS_VERSION_NUM"
	lib := strings.ReplaceAll(commonSrc, old, repl)
	if lib == commonSrc {
		t.Fatalf("common.lua no longer reads %s", old)
	}
	return redis.NewScript(link(lib, body))
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
