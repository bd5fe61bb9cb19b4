package torture

import (
	"testing"
	"time"
)

// Review of 364b583 (proposal, fails on purpose): believed() drops a hold
// whose context had ended at its worker's first look whether or not anything
// explains it. The rule's own reading is "a lease that ran out while the
// worker was stopped between Acquire's return and its first look"; without
// a pause of that worker between Asked and Got, such a hold means Acquire
// returned a lock already over (acquire.go's late check, or handedOver's
// refresh, failed to catch it), which the rule now hides without a trace:
// not a violation, not even an Expected count.
func TestCheckStaleGrantWithoutPauseIsNotHidden(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	hold := func(w int, fence, from, to int64) Hold {
		return Hold{Worker: w, Name: "a", Fence: fence, Asked: ms(from), Got: ms(from), Done: ms(to), Release: "ok", Final: "released"}
	}
	stale := hold(2, 2, 5, 20)
	stale.Lost, stale.Cause = stale.Got, "expired"
	for _, permits := range []int{0, 1} {
		h := History{Stopping: ms(2000), Stop: ms(2100), TTL: 400 * time.Millisecond, Permits: permits,
			Holds: []Hold{hold(1, 1, 0, 10), stale}}
		v := Check(h)
		if len(v.Violations) == 0 && len(v.Expected) == 0 {
			t.Errorf("permits %d: a hold ended at its first look with no pause of its worker vanished from the verdict: %s", permits, v.Summary())
		}
	}
}
