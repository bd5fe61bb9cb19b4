package torture

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// TakeoverMargin is how long after a killed holder's TTL its lock may stay
// untaken, with waiters in line, before Check calls it stranded.
const TakeoverMargin = 100 * time.Millisecond

// Verdict is what Check found in one history.
type Verdict struct {
	Holds    int
	Attempts map[string]int // Acquire calls that returned no lock, by outcome
	Faults   map[string]int // by kind

	// Expected counts overlaps of two holders that the contract admits, by
	// reason; Violations lists every finding that it does not, each one a
	// counterexample.
	Expected   map[string]int
	Violations []string

	Rejected    int // fenced reads and writes the resource refused
	LostUpdates int // accepted writes whose read was not the value they replaced

	// Takeovers: for each killed holder, how long after the kill the next
	// holder got its lock.
	Takeovers []time.Duration
	// Cuts counts holds cut off from Redis (blackhole, latency) whose lock
	// another worker took later; CutsEnded those whose holder saw its lock
	// end before that.
	Cuts, CutsEnded int
}

// Check judges a history. Holds are judged per name:
//   - two holds overlap when the second began before the first ended (see
//     Hold.End): expected if the first holder was paused during its hold or a
//     restart without persistence, an eviction or a failover fell between
//     the two acquisitions; otherwise a violation;
//   - fences grow strictly from one hold to the next;
//   - the resource's accepted writes form a chain: each replaced the value
//     its writer had read, else an update was lost;
//   - a killed holder's lock is taken by a waiter within TTL + TakeoverMargin;
//   - a Release that said "not held", or a context ended as "taken over",
//     while nobody else took the lock and no expected fault explains it, is a
//     false report of loss.
func Check(h History) Verdict {
	v := Verdict{Holds: len(h.Holds), Attempts: map[string]int{}, Faults: map[string]int{}, Expected: map[string]int{}}
	for _, a := range h.Attempts {
		v.Attempts[a.Outcome]++
	}
	for _, f := range h.Faults {
		v.Faults[f.Kind]++
	}
	c := checker{h: h, v: &v, byName: map[string][]Hold{}}
	for _, x := range h.Holds {
		c.byName[x.Name] = append(c.byName[x.Name], x)
	}
	for _, name := range slices.Sorted(maps.Keys(c.byName)) {
		holds := c.byName[name]
		slices.SortFunc(holds, func(a, b Hold) int { return cmp.Compare(a.Got, b.Got) })
		c.overlaps(holds)
		c.fences(holds)
		c.falseLoss(holds)
	}
	c.chain()
	c.kills()
	c.cuts()
	return v
}

type checker struct {
	h      History
	v      *Verdict
	byName map[string][]Hold // sorted by Got
}

func (c *checker) end(x Hold) int64 { return x.End(c.h.Stop) }

// ms renders a stamp relative to the run's start.
func (c *checker) ms(t int64) string { return fmt.Sprintf("%.1fms", float64(t-c.h.Start)/1e6) }

func (c *checker) who(x Hold) string {
	return fmt.Sprintf("w%d %q fence %d [%s, %s]", x.Worker, x.Name, x.Fence, c.ms(x.Got), c.ms(c.end(x)))
}

func (c *checker) violate(format string, args ...any) {
	c.v.Violations = append(c.v.Violations, fmt.Sprintf(format, args...))
}

// excuse names the expected fault that lets a hold of worker w overlap
// another between from and to, or "" if none does.
func (c *checker) excuse(w int, holdFrom, holdTo, from, to int64) string {
	for _, f := range c.h.Faults {
		why, ok := expected[f.Kind]
		switch {
		case !ok:
		case f.Kind == FaultPause:
			// The holder itself was stopped during its hold: its timer
			// could not fire, its critical section ran on.
			if f.Worker == w && f.From < holdTo && f.To > holdFrom {
				return why
			}
		case f.From <= to && f.To >= from:
			return why
		}
	}
	return ""
}

func (c *checker) overlaps(holds []Hold) {
	for i, a := range holds {
		ea := c.end(a)
		for _, b := range holds[i+1:] {
			if b.Got >= ea {
				break
			}
			if why := c.excuse(a.Worker, a.Got, ea, a.Got, b.Got); why != "" {
				c.v.Expected[why]++
				continue
			}
			c.violate("two holders: %s still believed it held the lock when %s got it", c.who(a), c.who(b))
		}
	}
}

func (c *checker) fences(holds []Hold) {
	for i := 1; i < len(holds); i++ {
		a, b := holds[i-1], holds[i]
		if b.Fence > a.Fence || b.Got < c.end(a) { // an overlap is reported as one
			continue
		}
		c.violate("fence did not grow: %s after %s", c.who(b), c.who(a))
	}
}

func (c *checker) falseLoss(holds []Hold) {
	takenBetween := func(x Hold, from, to int64) bool {
		for _, y := range holds {
			if y.Worker != x.Worker || y.Seq != x.Seq {
				if y.Got > from && y.Got <= to {
					return true
				}
			}
		}
		return false
	}
	for _, x := range holds {
		// A release that reached Redis after the lease ran out (delayed on
		// the way) rightly says not held: the holder's context then ended
		// as expired before Release returned, after Done.
		if x.Release == "not_held" && x.Lost == 0 && x.Done != 0 &&
			x.Cause != "expired" && x.Cause != "hold_limit" &&
			c.excuse(x.Worker, x.Got, x.Done, x.Got, x.Done) == "" {
			c.violate("Release said not held, yet the lease was believed valid to the end: %s", c.who(x))
		}
		if x.Cause == "taken_over" && x.Lost != 0 && !takenBetween(x, x.Got, x.Lost) &&
			c.excuse(x.Worker, x.Got, x.Lost, x.Got, x.Lost) == "" {
			c.violate("told the lock was taken over, yet nobody took it: %s", c.who(x))
		}
	}
}

// chain walks the resource's accesses in the order it applied them.
func (c *checker) chain() {
	for _, a := range c.h.Accesses {
		switch {
		case !a.OK:
			c.v.Rejected++
		case a.Op == "write" && a.Read != a.Value:
			c.v.LostUpdates++
			c.violate("lost update on %q: w%d (fence %d) wrote over %d having read %d", a.Name, a.Worker, a.Fence, a.Value, a.Read)
		}
	}
}

func (c *checker) kills() {
	limit := c.h.TTL + TakeoverMargin
	for _, f := range c.h.Faults {
		if f.Kind != FaultKill {
			continue
		}
		for _, x := range c.h.Holds {
			if x.Worker != f.Worker || x.Died == 0 || x.Died != f.To {
				continue
			}
			var next *Hold
			for _, y := range c.byName[x.Name] {
				if y.Got > f.From {
					next = &y
					break
				}
			}
			switch {
			case next != nil:
				d := time.Duration(next.Got - f.From)
				c.v.Takeovers = append(c.v.Takeovers, d)
				if d > limit {
					c.violate("killed holder's lock taken only %v after the kill (limit TTL + %v): %s", d.Round(time.Millisecond), TakeoverMargin, c.who(x))
				}
			case time.Duration(c.h.Stop-f.From) > limit:
				c.violate("killed holder's lock never taken again (%v to the end of the run): %s", time.Duration(c.h.Stop-f.From).Round(time.Millisecond), c.who(x))
			}
		}
	}
}

func (c *checker) cuts() {
	for _, f := range c.h.Faults {
		if f.Kind != FaultBlackhole && f.Kind != FaultLatency {
			continue
		}
		for _, x := range c.h.Holds {
			if (f.Worker >= 0 && x.Worker != f.Worker) || x.Got > f.From || c.end(x) < f.From {
				continue
			}
			for _, y := range c.byName[x.Name] {
				if y.Got > x.Got && y.Worker != x.Worker {
					c.v.Cuts++
					if c.end(x) < y.Got {
						c.v.CutsEnded++
					}
					break
				}
			}
		}
	}
}

// Summary is the verdict in one line.
func (v Verdict) Summary() string {
	var exp []string
	for _, why := range slices.Sorted(maps.Keys(v.Expected)) {
		exp = append(exp, fmt.Sprintf("%d %s", v.Expected[why], why))
	}
	if len(exp) == 0 {
		exp = []string{"none"}
	}
	return fmt.Sprintf("%d acquisitions, %d violations; expected overlaps: %s; fenced accesses rejected %d",
		v.Holds, len(v.Violations), strings.Join(exp, ", "), v.Rejected)
}
