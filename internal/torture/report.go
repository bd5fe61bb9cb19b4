package torture

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Result is one scenario's run and verdict.
type Result struct {
	Scenario Scenario
	Seed     uint64
	Verdict  Verdict
	Elapsed  time.Duration
}

// Violations counts the violations of every result.
func Violations(rs []Result) int {
	n := 0
	for _, r := range rs {
		n += len(r.Verdict.Violations)
	}
	return n
}

// WriteTable writes the results as a Markdown table, then each violation
// (at most a few per scenario), then the last line: the number of violations.
func WriteTable(w io.Writer, rs []Result) {
	fmt.Fprintln(w, "| scenario | acquisitions | faults injected | violations | expected overlaps (why) | fenced accesses rejected | kill → next acquire (median / max) | cut holders that knew before the next holder | false give-ups | server fault's end → next grant (median / max) |")
	fmt.Fprintln(w, "|---|---:|---|---:|---|---:|---|---|---:|---|")
	for _, r := range rs {
		v := r.Verdict
		fmt.Fprintf(w, "| %s | %d | %s | %d | %s | %d | %s | %s | %d | %s |\n",
			r.Scenario.Name, v.Holds, counts(v.Faults, "none"), len(v.Violations),
			counts(v.Expected, "none"), v.Rejected, takeovers(v.Takeovers), cuts(v), v.GiveUps, spread(v.FaultGrants, "faults"))
	}
	for _, r := range rs {
		for i, s := range r.Verdict.Violations {
			if i == 5 {
				fmt.Fprintf(w, "\n%s: %d more violations", r.Scenario.Name, len(r.Verdict.Violations)-i)
				break
			}
			fmt.Fprintf(w, "\nVIOLATION %s (seed %d): %s", r.Scenario.Name, r.Seed, s)
		}
	}
	fmt.Fprintf(w, "\nviolations: %d\n", Violations(rs))
}

func counts(m map[string]int, none string) string {
	if len(m) == 0 {
		return none
	}
	var s []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s = append(s, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(s, ", ")
}

func takeovers(d []time.Duration) string { return spread(d, "kills") }

// spread renders durations as median / max (count what).
func spread(d []time.Duration, what string) string {
	if len(d) == 0 {
		return "–"
	}
	s := slices.Sorted(slices.Values(d))
	return fmt.Sprintf("%v / %v (%d %s)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s), what)
}

func cuts(v Verdict) string {
	if v.Cuts == 0 {
		return "–"
	}
	return fmt.Sprintf("%d of %d", v.CutsEnded, v.Cuts)
}

// Add sums o into v, for one row over several runs (the seeds of the
// in-process injection).
func (v *Verdict) Add(o Verdict) {
	v.Holds += o.Holds
	v.Violations = append(v.Violations, o.Violations...)
	v.Rejected += o.Rejected
	v.LostUpdates += o.LostUpdates
	v.Takeovers = append(v.Takeovers, o.Takeovers...)
	v.Cuts += o.Cuts
	v.CutsEnded += o.CutsEnded
	v.GiveUps += o.GiveUps
	v.FaultGrants = append(v.FaultGrants, o.FaultGrants...)
	for _, m := range []struct{ dst, src *map[string]int }{{&v.Attempts, &o.Attempts}, {&v.Faults, &o.Faults}, {&v.Expected, &o.Expected}} {
		if *m.dst == nil {
			*m.dst = map[string]int{}
		}
		for k, n := range *m.src {
			(*m.dst)[k] += n
		}
	}
}
