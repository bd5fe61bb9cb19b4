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

	// Expected counts holds that others overlapped as the contract admits,
	// by reason; Violations lists every finding that it does not, each one a
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
	// GiveUps counts the Acquire calls judged false give-ups (each also a
	// violation).
	GiveUps int
	// FaultGrants: for each failover, migration or restart of the lock's
	// Redis, how long after its end the next lock was granted on a name it
	// touched (the waiters riding it out).
	FaultGrants []time.Duration
}

// Check judges a history. Holds are judged per name:
//   - two holds overlap when the second began before the first ended (see
//     Hold.End), unless both are reads (Hold.Shared): expected if the first holder was paused during its hold or a
//     restart without persistence, an eviction or a failover fell between
//     the two acquisitions; otherwise a violation;
//   - fences grow strictly from one hold to the next;
//   - the resource's accepted writes form a chain: each replaced the value
//     its writer had read, else an update was lost;
//   - a killed holder's lock is taken by a waiter within TTL + TakeoverMargin;
//   - a Release that said "not held", or a context ended as "taken over",
//     while nobody else took the lock and no expected fault explains it, is a
//     false report of loss;
//   - an Acquire that returned no lock while its wait still had time, or
//     whose wait saw the lock free for longer than TTL + TakeoverMargin with
//     no fault near, gave up falsely (see giveUps).
func Check(h History) Verdict {
	v := Verdict{Holds: len(h.Holds), Attempts: map[string]int{}, Faults: map[string]int{}, Expected: map[string]int{}}
	for _, a := range h.Attempts {
		v.Attempts[a.Outcome]++
	}
	for _, f := range h.Faults {
		v.Faults[f.Kind]++
	}
	c := checker{h: h, v: &v, byName: map[string][]Hold{}, unbelieved: map[[2]int]bool{}}
	for _, x := range h.Holds {
		c.byName[x.Name] = append(c.byName[x.Name], x)
	}
	for _, name := range slices.Sorted(maps.Keys(c.byName)) {
		holds := c.byName[name]
		slices.SortFunc(holds, func(a, b Hold) int { return cmp.Compare(a.Got, b.Got) })
		if c.h.Permits > 0 {
			c.crowds(holds, c.h.Permits)
		} else {
			c.overlaps(holds)
		}
		c.fences(holds)
		c.falseLoss(holds)
		if c.h.MinHold > 0 {
			c.minHolds(holds)
		}
	}
	c.chain()
	c.kills()
	c.cuts()
	c.giveUps()
	c.faultGrants()
	return v
}

type checker struct {
	h      History
	v      *Verdict
	byName map[string][]Hold // sorted by Got
	// unbelieved: the holds (worker, seq) that believed found to be no
	// holder, each counted once under the pause that explains it.
	unbelieved map[[2]int]bool
}

func (c *checker) end(x Hold) int64 { return x.End(c.h.Stop) }

// believed reports whether the holder of x believed in its lock. A hold
// whose context had ended when its worker first looked, before any work
// (Lost stamped at Got), while a pause of that worker between Asked and Got
// explains it (the lease ran out while the worker was stopped between
// Acquire's return and its first look), is no holder: counted as the pause,
// once, and judged no further. Without such a pause it is judged as any
// other hold: Acquire returned a lock already over, which the library's
// checks exist to prevent. (TestCheckStaleGrantWithoutPauseIsNotHidden.)
func (c *checker) believed(x Hold) bool {
	if x.Lost == 0 || x.Lost > x.Got {
		return true
	}
	for _, f := range c.h.Faults {
		if f.Kind == FaultPause && f.Worker == x.Worker && f.From < x.Got && f.To > x.Asked {
			if k := [2]int{x.Worker, x.Seq}; !c.unbelieved[k] {
				c.unbelieved[k] = true
				c.v.Expected[expected[FaultPause]]++
			}
			return false
		}
	}
	return true
}

// ms renders a stamp relative to the run's start.
func (c *checker) ms(t int64) string { return fmt.Sprintf("%.1fms", float64(t-c.h.Start)/1e6) }

func (c *checker) who(x Hold) string {
	return fmt.Sprintf("w%d %q fence %d [%s, %s]", x.Worker, x.Name, x.Fence, c.ms(x.Got), c.ms(c.end(x)))
}

// near lists the faults of the second before t and after it, for a
// counterexample.
func (c *checker) near(t int64) string {
	var s []string
	for _, f := range c.h.Faults {
		if f.To >= t-int64(time.Second) && f.From <= t+int64(time.Second) {
			w := "all"
			if f.Worker >= 0 {
				w = fmt.Sprintf("w%d", f.Worker)
			}
			s = append(s, fmt.Sprintf("%s %s [%s, %s] %s", f.Kind, w, c.ms(f.From), c.ms(f.To), f.Note))
		}
	}
	if len(s) == 0 {
		return ""
	}
	return "; faults near: " + strings.Join(s, "; ")
}

func (c *checker) violate(format string, args ...any) {
	c.v.Violations = append(c.v.Violations, fmt.Sprintf(format, args...))
}

// excuse names the expected fault that lets a hold of worker w on name
// overlap another between from and to, or "" if none does.
func (c *checker) excuse(w int, name string, holdFrom, holdTo, from, to int64) string {
	for _, f := range c.h.Faults {
		why, ok := expected[f.Kind]
		switch {
		case !ok:
		case f.Kind == FaultPause:
			// The holder itself was stopped during its hold, before the
			// other got the lock: its timer could not fire, its critical
			// section ran on. A pause that began after the other got the
			// lock explains nothing.
			if f.Worker == w && f.From < holdTo && f.To > holdFrom && f.From < to {
				return why
			}
		case f.Kind == FaultForceUnlock:
			// Excuses only the grant it removed, by fence (forced), not
			// every hold near it.
		case len(f.Names) > 0 && !slices.Contains(f.Names, name):
			// A fault of a server that does not hold this lock.
		case f.From <= to && f.To >= from:
			return why
		}
	}
	return ""
}

// forced returns the forced unlock (FaultForceUnlock) that removed x's own
// grant, found by its fence.
func (c *checker) forced(x Hold) (Fault, bool) {
	for _, f := range c.h.Faults {
		if f.Kind == FaultForceUnlock && f.Fence != 0 && f.Fence == x.Fence && f.Name == x.Name {
			return f, true
		}
	}
	return Fault{}, false
}

// forcedOverlap names the forced unlock that explains b's hold beginning
// inside a's, or "". Either a's grant was forced before b got the name (the
// holder learns at its next renewal: ForceUnlock's doc), or b's own grant
// was, before b's Acquire returned: the release handed b the lock, an
// operator forced it, and b then read the hand-off message and returned a
// Lock that Redis no longer held while a took the free name (b's fence is
// the smaller one, which a fenced resource refuses after a's write). A
// force after b got it explains nothing: the two overlapped before it.
func (c *checker) forcedOverlap(a, b Hold) string {
	for _, x := range []Hold{a, b} {
		if f, ok := c.forced(x); ok && f.From < b.Got {
			return expected[f.Kind]
		}
	}
	return ""
}

// overlaps counts each hold that another began inside once, under the
// reason that excuses the first such overlap; each unexcused pair is a
// violation.
func (c *checker) overlaps(holds []Hold) {
	for i, a := range holds {
		ea := c.end(a)
		counted := false
		for _, b := range holds[i+1:] {
			if b.Got >= ea {
				break
			}
			if a.Shared && b.Shared {
				continue // readers share; a writer overlaps nobody
			}
			if !c.believed(b) {
				continue
			}
			why := c.excuse(a.Worker, a.Name, a.Got, ea, a.Got, b.Got)
			if why == "" {
				why = c.forcedOverlap(a, b)
			}
			if why != "" {
				if !counted {
					c.v.Expected[why]++
					counted = true
				}
				continue
			}
			c.violate("two holders: %s still believed it held the lock when %s got it%s", c.who(a), c.who(b), c.near(a.Got))
		}
	}
}

// fences checks each hold's fence against the largest fence of every hold
// that got its lock before this one's Acquire was called: those grants came
// first, overlapping or not, so a fence that went back is found however many
// holds lie between.
//
// The holds before b.Asked are found by binary search, not by a pointer that
// only moves forward: Asked does not grow with Got (a waiter asks early and
// gets late), and a pointer moved on by a later asker counted, for an early
// one, holds that got after it asked. Under one holder at a time that went
// unseen, since their fences were smaller anyway; with permits, a grant
// learned late (a paused waiter) has a smaller fence than holds it did not
// ask after.
func (c *checker) fences(holds []Hold) {
	// best[i] is the hold of the largest fence among holds[:i+1].
	best := make([]int, len(holds))
	for i := range holds {
		best[i] = i
		if i > 0 && holds[best[i-1]].Fence >= holds[i].Fence {
			best[i] = best[i-1]
		}
	}
	for _, b := range holds { // sorted by Got
		n, _ := slices.BinarySearchFunc(holds, b.Asked, func(h Hold, t int64) int { return cmp.Compare(h.Got, t) })
		if n == 0 {
			continue
		}
		if top := holds[best[n-1]]; b.Fence <= top.Fence {
			c.violate("fence did not grow: %s after %s", c.who(b), c.who(top))
		}
	}
}

func (c *checker) falseLoss(holds []Hold) {
	takenBetween := func(x Hold, from, to int64) bool {
		for _, y := range holds {
			if (y.Worker != x.Worker || y.Seq != x.Seq) && !(x.Shared && y.Shared) {
				if y.Got > from && y.Got <= to {
					return true
				}
			}
		}
		return false
	}
	for _, x := range holds {
		// The lease deadline still ends the context while Release runs, so
		// "released" means the client believed in its lease until Redis
		// answered "not yours".
		// Release runs after Done: a fault up to its return explains it.
		relEnd := max(x.Released, x.Done)
		_, forced := c.forced(x)
		if x.Release == "not_held" && (x.Final == "released" || x.Final == "") && !forced &&
			c.excuse(x.Worker, x.Name, x.Got, relEnd, x.Got, relEnd) == "" && !c.nodeRestarted(x.Asked, x.Got, relEnd) {
			c.violate("Release said not held, yet the lease was believed valid until it answered: %s%s", c.who(x), c.near(x.Got))
		}
		if x.Cause == "taken_over" && x.Lost != 0 && !takenBetween(x, x.Got, x.Lost) && !forced &&
			c.excuse(x.Worker, x.Name, x.Got, x.Lost, x.Got, x.Lost) == "" {
			c.violate("told the lock was taken over, yet nobody took it: %s%s", c.who(x), c.near(x.Got))
		}
	}
}

// nodeRestarted reports whether a Redlock node was killed and started again
// empty between from and to. A Release that waited for such a node (its
// call retried while the node was down) hears "not ours" from it once it is
// back: with the node that never granted, a majority of "not ours", and the
// lock was indeed no longer on a quorum. That "not held" is the truth, as a
// Client's is after its Redis restarted empty (FaultRestartEmpty); unlike
// that fault, it excuses no overlap. (Seen in CI: a lock granted on nodes 0
// and 1, node 0 killed, the Release's call to it answered by the restarted
// node 300 ms later. Release's answer is pinned by redlock's
// TestReleaseAnsweredAfterValidity: keys gone within the validity, not held.)
//
// The node must be back by to: while it is down, a call to it fails and
// says nothing of the lock. Its window's end is stamped after its restart
// answered PING, a moment after it began to serve: restartSlack.
//
// The kill must also begin after the lock was asked for: a node already
// down when the lock was acquired granted nothing, and its "not ours" (a
// give-up of the token there) is counted whether or not it came back.
func (c *checker) nodeRestarted(asked, from, to int64) bool {
	const restartSlack = int64(100 * time.Millisecond)
	for _, f := range c.h.Faults {
		if f.Kind == FaultNodeKill && f.From >= asked && f.From <= to && f.To >= from && f.To <= to+restartSlack {
			return true
		}
	}
	return false
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

// kills judges every kill, of a holder or of a waiter (which may have been
// granted the lock just before it died): once the lock is free of live
// holders, a waiter must get it within TTL + TakeoverMargin, or, when the
// next taker asked only later, within TakeoverMargin of asking. Kills that
// other faults overlap are not judged: a cut or a pause delays waiters too.
func (c *checker) kills() {
	limit := c.h.TTL + TakeoverMargin
	for _, f := range c.h.Faults {
		if f.Kind != FaultKill || f.Name == "" {
			continue
		}
		holds := c.byName[f.Name]
		free := f.To
		for _, y := range holds {
			if y.Worker != f.Worker && y.Got <= f.From {
				free = max(free, c.end(y))
			}
		}
		var next *Hold
		for _, y := range holds {
			if y.Got > f.From && y.Worker != f.Worker {
				next = &y
				break
			}
		}
		until := c.h.Stopping
		if until == 0 {
			until = c.h.Stop
		}
		if next != nil {
			until = next.Got
		}
		if c.disturbed(f, free, until) {
			continue
		}
		d := time.Duration(until - free)
		switch {
		case next != nil:
			c.v.Takeovers = append(c.v.Takeovers, max(d, 0))
			// Taken by TTL + margin after it was free, or by margin after
			// the next taker asked, if nobody asked before: a lock nobody
			// waits for (every worker busy on the other name) stays free.
			if by := max(free+int64(c.h.TTL), next.Asked) + int64(TakeoverMargin); next.Got > by {
				c.violate("lock %q taken only %v after it was free of live holders, %v after its taker asked (limit: TTL + %v after free, or %v after asking), after the kill of w%d (%s)",
					f.Name, d.Round(time.Millisecond), time.Duration(next.Got-next.Asked).Round(time.Millisecond), TakeoverMargin, TakeoverMargin, f.Worker, f.Note)
			}
		case d > limit:
			c.violate("lock %q never taken again (%v until the workers were told to stop) after the kill of w%d (%s)", f.Name, d.Round(time.Millisecond), f.Worker, f.Note)
		}
	}
}

// disturbed tells whether another fault that can delay f's waiters overlaps
// [from, to]: a cut, a restart, a pause of a worker on the same name (a
// paused waiter may be handed the lock). Other kills do not: a waiter killed
// after its grant shows as a later hold, judged on its own.
func (c *checker) disturbed(f Fault, from, to int64) bool {
	for _, g := range c.h.Faults {
		switch {
		case g.Kind == FaultReset || g.Kind == FaultKill: // f itself among them
		case g.Kind == FaultPause && g.Name != f.Name:
		case g.From <= to && g.To >= from:
			return true
		}
	}
	return false
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

// giveUpSlack is how long before its wait ran out an Acquire may return no
// lock: its wait's deadline starts a moment after Asked is stamped, so an
// honest give-up returns after Asked + Wait; the slack covers only the
// stamps' own jitter.
const giveUpSlack = 20 * time.Millisecond

// giveUps judges every Acquire that returned no lock, when the lock promises
// a bounded wait (History.Wait). A waiting Acquire returns with the lock,
// when its time runs out, or at once on an error that is no outage, and no
// fault of the nemesis makes one (a failover, a restart, a cut, READONLY,
// LOADING, OOM: all outages, ridden out). So one that returned before its
// wait ran out gave up while it still had time. And one whose wait spanned a
// stretch where the name was free for longer than TTL + TakeoverMargin,
// with no fault near it, was not handed the lock nor took it: a waiter
// poisoned by a dead token, or one that stopped listening. "Free" counts a
// hold as busy from its grant until its Release returned "ok", or else
// until a TTL after its holder stopped believing (a dead or cut holder's key
// lives on until it expires). Names with permits are not judged for free
// stretches: a holder there does not keep a waiter out.
func (c *checker) giveUps() {
	if c.h.Wait <= 0 {
		return
	}
	for _, a := range c.h.Attempts {
		waited := time.Duration(a.End - a.Asked)
		if waited < c.h.Wait-giveUpSlack {
			c.v.GiveUps++
			c.violate("false give-up: w%d's Acquire of %q returned no lock after %v of its %v wait (%s, %s): %s%s",
				a.Worker, a.Name, waited.Round(time.Millisecond), c.h.Wait, c.ms(a.Asked), a.Outcome, a.Err, c.near(a.Asked))
			continue
		}
		if c.h.Permits > 0 {
			continue
		}
		if from, to, ok := c.freeStretch(a); ok {
			c.v.GiveUps++
			c.violate("false give-up: w%d's Acquire of %q returned no lock (%s) although %q was free for %v of its wait [%s, %s]%s",
				a.Worker, a.Name, a.Outcome, a.Name, time.Duration(to-from).Round(time.Millisecond), c.ms(from), c.ms(to), c.near(from))
		}
	}
}

// freeStretch finds, within a's wait, a stretch longer than TTL +
// TakeoverMargin in which no hold of a.Name kept the name busy and no fault
// other than a kill (whose holder's key the TTL covers) was near.
func (c *checker) freeStretch(a Attempt) (from, to int64, ok bool) {
	type span struct{ from, to int64 }
	var busy []span
	for _, x := range c.byName[a.Name] {
		end := c.end(x) + int64(c.h.TTL)
		if x.Release == "ok" && x.Released != 0 {
			end = x.Released
		}
		if f, ok := c.forced(x); ok {
			// Free from the forced unlock on, whatever its holder believed.
			end = min(end, f.To)
		}
		if end > x.Got {
			busy = append(busy, span{x.Got, end})
		}
	}
	slices.SortFunc(busy, func(p, q span) int { return cmp.Compare(p.from, q.from) })
	limit := int64(c.h.TTL + TakeoverMargin)
	at := a.Asked
	check := func(gapTo int64) bool {
		if gapTo-at <= limit {
			return false
		}
		for _, f := range c.h.Faults {
			// A kill explains no free name (its holder's key lives a TTL,
			// counted above), nor does a forced unlock (it frees the name),
			// nor a fault of a server that does not hold it.
			if f.Kind == FaultKill || f.Kind == FaultForceUnlock || len(f.Names) > 0 && !slices.Contains(f.Names, a.Name) {
				continue
			}
			if f.From <= gapTo && f.To >= at-int64(c.h.TTL) {
				return false
			}
		}
		return true
	}
	for _, b := range busy {
		if b.from >= a.End {
			break
		}
		if b.from > at && check(b.from) {
			return at, b.from, true
		}
		at = max(at, b.to)
	}
	if at < a.End && check(a.End) {
		return at, a.End, true
	}
	return 0, 0, false
}

// faultGrants measures, for each fault of the lock's Redis that a wait must
// ride out (a failover, a slot migration, a restart), the time from its end
// to the first grant after it on a name it touched.
func (c *checker) faultGrants() {
	for _, f := range c.h.Faults {
		switch f.Kind {
		case FaultFailover, FaultFailoverManual, FaultMigrate, FaultRestartAOF, FaultRestartEmpty, FaultCrash, FaultCrashDurable:
		default:
			continue
		}
		next := int64(0)
		for name, holds := range c.byName {
			if len(f.Names) > 0 && !slices.Contains(f.Names, name) {
				continue
			}
			for _, x := range holds {
				if x.Got >= f.To {
					if next == 0 || x.Got < next {
						next = x.Got
					}
					break
				}
			}
		}
		if next != 0 {
			c.v.FaultGrants = append(c.v.FaultGrants, time.Duration(next-f.To))
		}
	}
}
