package torture

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// crashRounds writes a counter with SET + WAITAOF 1 0 on Valkey with
// appendfsync fsync for a while, crashes it as the crash fault does (the
// AOF cut to its last fsync) and restarts it, rounds times; it returns, per
// round, the last value WAITAOF confirmed and the value the restart kept.
func crashRounds(t *testing.T, fsync string, rounds int) (confirmed, kept []int64) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	env, log, err := crashEnv(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := redistest.LaunchFlavorEnv(ctx, "valkey", dir, env, "--appendonly", "yes", "--appendfsync", fsync)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	for range rounds {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		last := int64(-1)
		for i, end := int64(0), time.Now().Add(500*time.Millisecond); time.Now().Before(end); i++ {
			pipe := rdb.Pipeline()
			pipe.Set(ctx, "n", i, 0)
			wait := pipe.Do(ctx, "WAITAOF", 1, 0, 2000)
			_, _ = pipe.Exec(ctx)
			if v, _ := wait.Slice(); len(v) == 2 && v[0] == int64(1) {
				last = i
			}
		}
		_ = rdb.Close()
		srv.Kill()
		if _, err := cutToFsynced(log); err != nil {
			t.Fatal(err)
		}
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		rdb = redis.NewClient(&redis.Options{Addr: srv.Addr})
		n, err := rdb.Get(ctx, "n").Int64()
		_ = rdb.Close()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if err == redis.Nil {
			n = -1
		}
		confirmed, kept = append(confirmed, last), append(kept, n)
	}
	return confirmed, kept
}

// Under appendfsync always the crash keeps every write WAITAOF confirmed:
// the cut is no harsher than a machine crash.
func TestCrashKeepsWhatAlwaysFsynced(t *testing.T) {
	confirmed, kept := crashRounds(t, "always", 3)
	for i := range confirmed {
		if confirmed[i] < 0 || kept[i] < confirmed[i] {
			t.Errorf("round %d: WAITAOF confirmed %d, the crash kept %d", i, confirmed[i], kept[i])
		}
	}
}

// Valkey 8.0.1 confirms WAITAOF before the fsync under everysec (the
// branch Redis 8.0 fixed, redis/redis#13793): a crash loses writes it
// confirmed. This is why dlock refuses WithDurableGrant there
// (serverreq.EarlyWaitAOF). Should Debian's Valkey fix it, this fails, and
// EarlyWaitAOF can let that Valkey through.
func TestWAITAOFConfirmsBeforeFsyncUnderEverysec(t *testing.T) {
	confirmed, kept := crashRounds(t, "everysec", 6)
	for i := range confirmed {
		if kept[i] < confirmed[i] {
			t.Logf("round %d: WAITAOF confirmed %d, the crash kept %d", i, confirmed[i], kept[i])
			return
		}
	}
	t.Fatalf("in %d crashes WAITAOF never confirmed a write the crash lost (confirmed %v, kept %v): this Valkey waits for its fsync under everysec; let it through in serverreq.EarlyWaitAOF", len(confirmed), confirmed, kept)
}
