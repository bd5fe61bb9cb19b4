package torture

import (
	"cmp"
	"slices"
	"time"
)

// minHoldSlack covers Redis counting the grant and the lease in whole ms.
const minHoldSlack = 2 * time.Millisecond

// minHolds checks dlock.WithMinHold on the holds of one name: the lock is
// granted in Redis after its holder called Acquire (Asked), and kept until
// min hold after that grant, released or not; so the next holder cannot have
// got it before Asked + MinHold of the one before, on the history's clock.
// "Next" goes by fence, the order of the grants: Got, stamped when the reply
// arrived, can invert two grants whose replies were delayed. Asked is a lower bound of the grant only: a holder that waited long
// is checked loosely, one that was granted at once tightly. Reads are not
// judged (a min hold with WithShared is not a case this run makes).
func (c *checker) minHolds(holds []Hold) {
	holds = slices.Clone(holds)
	slices.SortFunc(holds, func(a, b Hold) int { return cmp.Compare(a.Fence, b.Fence) })
	for j := 1; j < len(holds); j++ {
		a, b := holds[j-1], holds[j]
		if a.Shared || b.Shared {
			continue
		}
		until := a.Asked + int64(c.h.MinHold-minHoldSlack)
		if b.Got >= until {
			continue
		}
		if why := c.excuse(a.Worker, a.Name, a.Got, until, a.Got, b.Got); why != "" {
			c.v.Expected[why]++
			continue
		}
		c.violate("min hold cut short: %s got the lock %.1fms after %s asked for it, before its min hold of %v%s",
			c.who(b), float64(b.Got-a.Asked)/1e6, c.who(a), c.h.MinHold, c.near(b.Got))
	}
}

// sortedByFence returns a copy of holds sorted by name, then fence.
func sortedByFence(holds []Hold) []Hold {
	holds = slices.Clone(holds)
	slices.SortFunc(holds, func(a, b Hold) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Fence, b.Fence))
	})
	return holds
}
