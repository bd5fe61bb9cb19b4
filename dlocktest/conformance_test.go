package dlocktest_test

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// harness runs the suite against the double; loseWith is how a lock is lost
// behind its holder's back.
func harness(loseWith func(l *dlocktest.Locker, name string) bool) dlocktest.Harness {
	return dlocktest.Harness{
		New: func(t *testing.T) dlock.Locker {
			l := dlocktest.MustNew()
			t.Cleanup(func() { _ = l.Close(context.Background()) })
			return l
		},
		Expire: func(t *testing.T, l dlock.Locker, name string) {
			t.Helper()
			if !loseWith(l.(*dlocktest.Locker), name) {
				t.Fatalf("%q was not held", name)
			}
		},
		Waiters: func(l dlock.Locker, name string) int { return l.(*dlocktest.Locker).Waiters(name) },
		Shared:  true,
	}
}

// The two runs and the broken lockers' runs go side by side: they spend
// their time sleeping on real-clock leases, not on the CPU.
func TestConformance(t *testing.T) {
	t.Parallel()
	// Expire: the holder learns at once, then the name is free.
	t.Run("Expire", func(t *testing.T) {
		t.Parallel()
		dlocktest.Conformance(t, harness((*dlocktest.Locker).Expire))
	})
	// ForceUnlock: the name is free at once, the holder learns at its next
	// renewal, as after a key deleted in Redis.
	t.Run("ForceUnlock", func(t *testing.T) {
		t.Parallel()
		dlocktest.Conformance(t, harness((*dlocktest.Locker).ForceUnlock))
	})
}
