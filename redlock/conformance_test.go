package redlock_test

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/node"
)

// The Redlock passes the conformance suite every Locker passes, on three
// real redis-servers, but for what it does not offer.
func TestConformance(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	dlocktest.Conformance(t, dlocktest.Harness{
		New: func(t *testing.T) dlock.Locker { return newRedlock(t, rdbs) },
		// Lost on every node: the next renewal finds it gone on a majority
		// and ends the lock's context. Deleting it on two nodes only is not
		// enough: the third node's attempt may still be on its way when
		// TryAcquire returns (a quorum answered), and its late grant
		// joins the lock, which then lives on a quorum again.
		Expire: func(t *testing.T, _ dlock.Locker, name string) {
			t.Helper()
			key := node.KeysOf(dlock.DefaultPrefix, name).Lock
			for _, rdb := range rdbs {
				if err := rdb.Del(bg, key).Err(); err != nil {
					t.Fatalf("deleting %s: %v", key, err)
				}
			}
		},
		Skip: map[string]string{
			"FIFO":    "a Redlock's waiters retry with jittered backoff; there is no queue across nodes",
			"MaxHold": "a Redlock refuses WithMaxHold",
			"MinHold": "a Redlock refuses WithMinHold",
		},
		NoSemaphores: "a Redlock refuses Permits: n permits on independent nodes are no semaphore of n",
	})
}
