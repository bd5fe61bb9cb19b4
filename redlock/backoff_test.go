package redlock_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/redlock"
)

// TestBackoffIsJittered: pauses spread uniformly over their whole range,
// whose ceiling grows with the attempts and is capped by a tenth of the
// TTL, by 1s, and by the holder's lease; never below 5ms.
func TestBackoffIsJittered(t *testing.T) {
	const draws = 2000
	for _, tc := range []struct {
		name      string
		n         int
		ttl, held time.Duration
		lo, hi    time.Duration
	}{
		{"first retry", 0, 10 * time.Second, 0, 5 * time.Millisecond, 10 * time.Millisecond},
		{"fourth retry", 3, 10 * time.Second, 0, 5 * time.Millisecond, 80 * time.Millisecond},
		{"capped at 1s", 20, 10 * time.Second, 0, 5 * time.Millisecond, time.Second},
		{"capped at ttl/10", 20, 300 * time.Millisecond, 0, 5 * time.Millisecond, 30 * time.Millisecond},
		{"capped at the holder's lease", 20, 10 * time.Second, 40 * time.Millisecond, 5 * time.Millisecond, 40 * time.Millisecond},
		{"never below 5ms", 20, 10 * time.Second, time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[time.Duration]bool{}
			var sum time.Duration
			for range draws {
				d := redlock.Backoff(tc.n, tc.ttl, tc.held)
				if d < tc.lo || d > tc.hi {
					t.Fatalf("pause %v outside [%v, %v]", d, tc.lo, tc.hi)
				}
				seen[d] = true
				sum += d
			}
			if tc.lo == tc.hi {
				return
			}
			// Uniform: many distinct values, mean near the middle (the
			// mean of 2000 draws is within 5% of the range of it with
			// overwhelming probability).
			mid, span := (tc.lo+tc.hi)/2, tc.hi-tc.lo
			if mean := sum / draws; mean < mid-span/20 || mean > mid+span/20 {
				t.Fatalf("mean pause %v, want about %v", mean, mid)
			}
			if len(seen) < draws/2 {
				t.Fatalf("%d distinct pauses in %d draws", len(seen), draws)
			}
		})
	}
}
