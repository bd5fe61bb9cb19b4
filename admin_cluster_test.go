package dlock_test

import (
	"fmt"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// List's limit holds for the whole Cluster, not per primary: the primaries
// are scanned at once and each used to add its first lock before seeing the
// limit reached (List(limit 1) returned 3 locks on 3 primaries).
func TestListLimitCluster(t *testing.T) {
	cs := redistest.StartCluster(t, redistest.WithReplicas(0))
	c := newLocker(t, cs.ClusterClient(t))
	const n = 30 // spread over the three primaries' slots
	for i := range n {
		mustAcquire(t, c, fmt.Sprintf("lim:%d", i))
		mustAcquire(t, c, fmt.Sprintf("sem:%d", i), dlock.WithPermits(2))
	}
	for _, tc := range []struct {
		match      string
		limit, got int
	}{{"lim:*", 1, 1}, {"lim:*", 2, 2}, {"lim:*", 5, 5}, {"sem:*", 1, 1}, {"*", 4, 4}, {"lim:*", 0, n}, {"lim:*", n + 10, n}} {
		got, err := c.List(bg, tc.match, tc.limit)
		if err != nil || len(got) != tc.got {
			t.Errorf("List(%q, %d) on 3 primaries: %d locks, %v; want %d", tc.match, tc.limit, len(got), err, tc.got)
		}
	}
}
