package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestSemaphoreDispatch: a token with the semaphore prefix takes the
// semaphore's scripts and keys, and leaves the lock hash alone; the
// refusals come back as Grant fields.
func TestSemaphoreDispatch(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	k := node.KeysOf("test:", "sem")
	args := node.AcquireArgs{TTL: time.Second, Alive: time.Second, QueueExpiry: time.Second, FenceLifetime: time.Hour, Permits: 2}
	grant := func(token string, a node.AcquireArgs) node.Grant {
		t.Helper()
		res, err := node.Acquire(k, token, a).Run(ctx, rdb).Slice()
		if err != nil {
			t.Fatal(err)
		}
		g, err := node.ParseGrant(res)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if g := grant("Sa", args); !g.OK {
		t.Fatalf("first permit: %+v", g)
	}
	if n := rdb.Exists(ctx, k.Lock).Val(); n != 0 {
		t.Fatal("a permit wrote the lock hash")
	}
	if got := rdb.ZCard(ctx, k.Sem().Permits).Val(); got != 1 {
		t.Fatalf("%d permits", got)
	}
	other := args
	other.Permits = 3
	if g := grant("Sb", other); g.OK || g.Permits != 2 {
		t.Fatalf("another n: %+v, want Permits 2", g)
	}
	if left, err := node.PTTL(k, "Sa").Run(ctx, rdb).Int64(); err != nil || left <= 0 || left > 1000 {
		t.Fatalf("pttl = %d, %v", left, err)
	}
	if ok, err := node.Refresh(k, "Sa", 5*time.Second).Run(ctx, rdb).Int64(); err != nil || ok != 1 {
		t.Fatalf("refresh = %d, %v", ok, err)
	}
	if res, err := node.Release(k, "Sa", node.ReleaseArgs{Record: time.Second, FenceLifetime: time.Hour}).Run(ctx, rdb).Int64(); err != nil || res != 1 {
		t.Fatalf("release = %d, %v", res, err)
	}
	// An exclusive lock of the name refuses permits.
	if g := grant("lock-token", node.AcquireArgs{TTL: time.Second, FenceLifetime: time.Hour}); !g.OK {
		t.Fatalf("exclusive: %+v", g)
	}
	if g := grant("Sc", args); g.OK || !g.Exclusive {
		t.Fatalf("a permit of a name held as a lock: %+v", g)
	}
	if node.IsSem("lock-token") || !node.IsSem("Sa") {
		t.Fatal("IsSem")
	}
}
