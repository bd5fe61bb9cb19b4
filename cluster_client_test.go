package dlock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A client of one Cluster node, not a Cluster client, gets MOVED for the
// names other nodes serve. That is a mistake of set-up, not an outage: a
// waiting Acquire returns at once, with an error that says what to use,
// rather than riding it out to the end of its wait as ErrUnavailable.
func TestPlainClientOfClusterNodeFailsAtOnce(t *testing.T) {
	cs := redistest.StartCluster(t)
	c := newLocker(t, cs.Nodes[0].Client(t))
	for i := range 64 {
		name := fmt.Sprintf("elsewhere-%d", i)
		start := time.Now()
		l, err := c.Acquire(bg, name, dlock.WithWait(5*time.Second))
		if err == nil {
			_ = l.Release(bg)
			continue // this node serves the name
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("MOVED ended a 5s wait after %v: it must end it at once", took)
		}
		if errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("MOVED from a client of one node matches ErrUnavailable or ErrNotObtained: %v", err)
		}
		if !strings.Contains(err.Error(), "MOVED") || !strings.Contains(err.Error(), "NewClusterClient") || !strings.Contains(err.Error(), name) {
			t.Errorf("the error does not say what to use: %v", err)
		}
		return
	}
	t.Fatal("node 0 served all 64 names")
}
