package dlock_test

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestConformance runs dlocktest's conformance suite against a Client on a
// real redis-server: the same suite dlocktest's in-memory Locker passes, so
// the two cannot drift apart.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	dlocktest.Conformance(t, dlocktest.Harness{
		New: func(t *testing.T) dlock.Locker { return newLocker(t, rdb) },
		// A lock is lost behind its holder's back when its key goes: the
		// next renewal finds it gone and ends the lock's context.
		Expire: func(t *testing.T, _ dlock.Locker, name string) {
			t.Helper()
			if n, err := rdb.Del(bg, node.KeysOf(dlock.DefaultPrefix, name).Lock).Result(); err != nil || n != 1 {
				t.Fatalf("deleting the key of %q: %d, %v", name, n, err)
			}
		},
		Waiters: func(l dlock.Locker, name string) int { return dlock.LocalWaiters(l.(*dlock.Client), name) },
		Shared:  true,
	})
}
