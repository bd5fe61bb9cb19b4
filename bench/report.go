package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// report collects cell results and prints them as markdown: a header that
// says where the numbers come from, one table per scenario and layout with
// the median over repetitions of each metric, and the settings of every
// library, since defaults are part of what is being compared.
type report struct {
	cfg     *config
	srv     *redisServer
	libs    []library
	started time.Time
	results map[resultKey][]cellResult
}

type resultKey struct {
	spec cellSpec
	lib  string
}

func newReport(cfg *config, srv *redisServer, libs []library) *report {
	return &report{cfg: cfg, srv: srv, libs: libs, started: time.Now(), results: map[resultKey][]cellResult{}}
}

func (r *report) add(spec cellSpec, lib string, res cellResult) {
	k := resultKey{spec, lib}
	r.results[k] = append(r.results[k], res)
}

// metric extracts one number from a cell; -1 means not measured.
type metric func(*cellResult) float64

func seconds(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return d.Seconds()
}

var (
	mThroughput = func(c *cellResult) float64 { return c.throughput() }
	mAcqP50     = func(c *cellResult) float64 { return seconds(c.acquire.percentile(50)) }
	mAcqP99     = func(c *cellResult) float64 { return seconds(c.acquire.percentile(99)) }
	mRelP50     = func(c *cellResult) float64 { return seconds(c.release.percentile(50)) }
	mRelP99     = func(c *cellResult) float64 { return seconds(c.release.percentile(99)) }
	mMeanWait   = func(c *cellResult) float64 { return seconds(c.waits.mean()) }
	mSlowest    = func(c *cellResult) float64 { return seconds(c.slowestWait()) }
	mGapP50     = func(c *cellResult) float64 { return seconds(c.gaps.percentile(50)) }
	mGapP99     = func(c *cellResult) float64 { return seconds(c.gaps.percentile(99)) }
	mRT         = func(c *cellResult) float64 { return c.perOp(float64(c.rt)) }
	mCPU        = func(c *cellResult) float64 { return c.perOp(c.server.cpu) }
	mClientCPU  = func(c *cellResult) float64 { return c.perOp(c.clientCPU) }
	mCmds       = func(c *cellResult) float64 { return c.perOp(float64(c.server.commands)) }
	mAllocs     = func(c *cellResult) float64 { return c.perOp(float64(c.allocs)) }
	mSpread     = func(c *cellResult) float64 { return c.spread }
)

// median of m over the repetitions of one cell, skipping failed cells.
func (r *report) median(spec cellSpec, lib string, m metric) float64 {
	var vals []float64
	for i := range r.results[resultKey{spec, lib}] {
		c := &r.results[resultKey{spec, lib}][i]
		if c.err == nil {
			vals = append(vals, m(c))
		}
	}
	return median(vals)
}

// column is one table column: a header and how to render a library's cell.
type column struct {
	head string
	cell func(spec cellSpec, lib string) string
}

func (r *report) col(head string, m metric, format func(float64) string) column {
	return column{head, func(spec cellSpec, lib string) string { return format(r.median(spec, lib, m)) }}
}

func (r *report) vsRaw() column {
	return column{"vs raw", func(spec cellSpec, lib string) string {
		return fmtRatio(ratio(r.median(spec, lib, mThroughput), r.median(spec, "raw", mThroughput)))
	}}
}

func (r *report) problems() column {
	return column{"problems (all reps)", func(spec cellSpec, lib string) string { return r.problemText(spec, lib) }}
}

func (r *report) write(w io.Writer, interrupted bool) {
	cfg := r.cfg
	fmt.Fprintf(w, "# Redis lock libraries, side by side\n\n")
	fmt.Fprintf(w, "%s · %s %s/%s · CPU %s, %d cores (GOMAXPROCS %d) · redis-server %s on loopback, no persistence\n\n",
		r.started.Format("2006-01-02 15:04 MST"), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), r.srv.version)
	fmt.Fprintf(w, "Median of %d repetition(s), %v per cell, libraries interleaved. Lock TTL %v; contended and hand-off: %d goroutines on one lock, hold %v; hand-off pause %v.\n",
		cfg.reps, cfg.duration, cfg.ttl, cfg.contenders, cfg.hold, cfg.pause)
	if interrupted {
		fmt.Fprintf(w, "\n**Interrupted: partial results.**\n")
	}
	perOp := func(what string) []column {
		return []column{
			r.col("round trips/"+what, mRT, fmtNum),
			r.col("Redis CPU/"+what, mCPU, fmtDur),
			r.col("client CPU/"+what, mClientCPU, fmtDur),
			r.col("server cmds/"+what, mCmds, fmtNum),
			r.col("allocs/"+what, mAllocs, fmtNum),
		}
	}
	if cfg.scenarios[uncontended] {
		fmt.Fprintf(w, "\n## Uncontended: G goroutines, each on its own lock, one shared client\n\n")
		cols := []column{
			r.col("cycles/s", mThroughput, fmtRate), r.vsRaw(),
			r.col("acquire p50", mAcqP50, fmtDur), r.col("acquire p99", mAcqP99, fmtDur),
			r.col("release p50", mRelP50, fmtDur), r.col("release p99", mRelP99, fmtDur),
		}
		cols = append(append(cols, perOp("cycle")...), r.problems())
		var specs []cellSpec
		for _, g := range cfg.gs {
			specs = append(specs, cellSpec{scenario: uncontended, layout: shared, g: g})
		}
		r.table(w, specs, cols, true)
	}
	for _, lay := range []layout{shared, separate} {
		if !cfg.scenarios[contended] {
			break
		}
		fmt.Fprintf(w, "\n## Contended, %s: %d goroutines, one lock, hold %v, retry at once after release\n\n", lay, cfg.contenders, cfg.hold)
		cols := []column{
			r.col("acq/s", mThroughput, fmtRate), r.vsRaw(),
			r.col("mean wait", mMeanWait, fmtDur), r.col("slowest wait", mSlowest, fmtDur),
			r.col("spread", mSpread, fmtPct),
		}
		cols = append(append(cols, perOp("acq")...), r.problems())
		r.table(w, []cellSpec{{scenario: contended, layout: lay, g: cfg.contenders}}, cols, false)
	}
	for _, lay := range []layout{shared, separate} {
		if !cfg.scenarios[handoff] {
			break
		}
		fmt.Fprintf(w, "\n## Hand-off, %s: %d goroutines, one lock, hold %v, pause %v after release\n\n", lay, cfg.contenders, cfg.hold, cfg.pause)
		cols := []column{
			r.col("acq/s", mThroughput, fmtRate), r.vsRaw(),
			r.col("gap p50", mGapP50, fmtDur), r.col("gap p99", mGapP99, fmtDur),
			r.col("slowest wait", mSlowest, fmtDur), r.col("spread", mSpread, fmtPct),
		}
		cols = append(append(cols, perOp("acq")...), r.problems())
		r.table(w, []cellSpec{{scenario: handoff, layout: lay, g: cfg.contenders}}, cols, false)
	}
	fmt.Fprintf(w, "\n## Libraries\n\n")
	for _, l := range r.libs {
		fmt.Fprintf(w, "- **%s**: %s\n", l.name, l.settings(cfg))
	}
	fmt.Fprint(w, legend)
}

const legend = `
## Reading the tables

- Clients: go-redis with its defaults (RESP3, a pool of 10 × GOMAXPROCS connections, so at G=64 goroutines queue for a connection); rueidislock has one auto-pipelining connection per Locker. *shared* = one client for all goroutines (one process; for dlock one dlock.Client on it, as its README asks, so its goroutines share its local queues and its batching); *separate* = one client per goroutine (one process each).
- *vs raw*: throughput divided by the raw baseline's in the same table.
- *acquire*/*release*: latency of one Acquire / release call.
- *wait*: Acquire call start → lock held. *slowest wait* includes waits still pending when the cell ended (a lower bound for those), so a starved goroutine shows.
- *spread*: how evenly the goroutines of a contended or hand-off cell got the lock: (most acquisitions of one goroutine − fewest) / the mean, the median over repetitions; 0 % is perfectly even. A poller's spread is large: whoever retries at the right moment wins again.
- *gap*: the previous holder's release call returning → the next holder's Acquire returning, on the process's monotonic clock; it is the time the lock sat free (plus one reply).
- *round trips*: counted in the client: one per command or pipeline the library sends and waits for (go-redis hook; a rueidis.Client wrapper), including failed attempts and releases, divided by completed acquisitions.
- *Redis CPU*: delta of INFO used_cpu_sys+used_cpu_user around the cell, divided by completed acquisitions.
- *client CPU*: this process's user+sys CPU time (getrusage) over the cell, divided by completed acquisitions: the library, go-redis and the Go runtime, one library at a time.
- *allocs*: heap objects this process allocated over the cell (runtime/metrics /gc/heap/allocs:objects), divided by completed acquisitions: the library, go-redis and the harness's own bookkeeping, which is the same for every library.
- *server cmds*: delta of INFO total_commands_processed (counts commands run inside scripts too) divided by completed acquisitions.
- *problems*: gave up = Acquire returned without the lock before the cell ended (library limit or -wait); lost = release found the lock gone; errors = other errors; overlap = a goroutine acquired while another held the lock (must be 0).
`

// table writes one markdown table. With groupByG, a leading G column
// separates the cells of different goroutine counts.
func (r *report) table(w io.Writer, specs []cellSpec, cols []column, groupByG bool) {
	var head []string
	if groupByG {
		head = append(head, "G")
	}
	head = append(head, "library")
	for _, c := range cols {
		head = append(head, c.head)
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(head, " | "))
	seps := make([]string, len(head))
	for i := range seps {
		seps[i] = "---:"
	}
	seps[len(head)-len(cols)-1] = ":---" // library
	seps[len(seps)-1] = ":---"           // problems
	fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
	for _, spec := range specs {
		for _, l := range r.libs {
			var row []string
			if groupByG {
				row = append(row, fmt.Sprint(spec.g))
			}
			row = append(row, l.name)
			if err := r.allFailed(spec, l.name); err != nil {
				row = append(row, "error: "+strings.ReplaceAll(err.Error(), "|", "/"))
				for range len(cols) - 1 {
					row = append(row, "")
				}
			} else {
				for _, c := range cols {
					row = append(row, c.cell(spec, l.name))
				}
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	}
}

// allFailed returns the first error if no repetition of the cell ran (nil
// if at least one did, or none is recorded).
func (r *report) allFailed(spec cellSpec, lib string) error {
	res := r.results[resultKey{spec, lib}]
	if len(res) == 0 {
		return fmt.Errorf("not run")
	}
	for _, c := range res {
		if c.err == nil {
			return nil
		}
	}
	return res[0].err
}

func (r *report) problemText(spec cellSpec, lib string) string {
	var gaveUp, lost, failures, overlaps int64
	var firstErr error
	for _, c := range r.results[resultKey{spec, lib}] {
		gaveUp += c.gaveUp
		lost += c.lost
		failures += c.failures
		overlaps += c.overlaps
		if firstErr == nil {
			firstErr = c.firstErr
		}
	}
	var parts []string
	if gaveUp > 0 {
		parts = append(parts, fmt.Sprintf("gave up %d", gaveUp))
	}
	if lost > 0 {
		parts = append(parts, fmt.Sprintf("lost %d", lost))
	}
	if overlaps > 0 {
		parts = append(parts, fmt.Sprintf("**overlap %d**", overlaps))
	}
	if failures > 0 {
		parts = append(parts, fmt.Sprintf("errors %d (%s)", failures, strings.ReplaceAll(firstErr.Error(), "|", "/")))
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, ", ")
}

// progressLine summarises one cell for stderr.
func progressLine(spec cellSpec, c *cellResult) string {
	if c.err != nil {
		return "ERROR " + c.err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%8s ops/s", fmtRate(c.throughput()))
	switch spec.scenario {
	case uncontended:
		fmt.Fprintf(&b, "  acq p50 %s p99 %s  rel p50 %s", fmtDur(mAcqP50(c)), fmtDur(mAcqP99(c)), fmtDur(mRelP50(c)))
	case contended:
		fmt.Fprintf(&b, "  wait mean %s max %s", fmtDur(mMeanWait(c)), fmtDur(mSlowest(c)))
	case handoff:
		fmt.Fprintf(&b, "  gap p50 %s p99 %s  max wait %s", fmtDur(mGapP50(c)), fmtDur(mGapP99(c)), fmtDur(mSlowest(c)))
	}
	fmt.Fprintf(&b, "  RT/op %s", fmtNum(mRT(c)))
	if c.gaveUp+c.failures+c.lost+c.overlaps > 0 {
		fmt.Fprintf(&b, "  gaveUp %d errors %d lost %d overlaps %d", c.gaveUp, c.failures, c.lost, c.overlaps)
		if c.firstErr != nil {
			fmt.Fprintf(&b, " (%v)", c.firstErr)
		}
	}
	return b.String()
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

const dash = "–"

// fmtDur formats seconds with a unit that keeps 2–3 significant digits.
func fmtDur(s float64) string {
	switch {
	case s < 0:
		return dash
	case s < 1e-3:
		return fmt.Sprintf("%.0fµs", s*1e6)
	case s < 10e-3:
		return fmt.Sprintf("%.2fms", s*1e3)
	case s < 1:
		return fmt.Sprintf("%.1fms", s*1e3)
	default:
		return fmt.Sprintf("%.2fs", s)
	}
}

func fmtRate(v float64) string {
	if v < 0 {
		return dash
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtRatio(v float64) string {
	if v < 0 {
		return dash
	}
	return fmt.Sprintf("%.2f×", v)
}

// fmtPct formats a fraction as a percentage.
func fmtPct(v float64) string {
	if v < 0 {
		return dash
	}
	return fmt.Sprintf("%.0f %%", v*100)
}

func fmtNum(v float64) string {
	if v < 0 {
		return dash
	}
	return fmt.Sprintf("%.2f", v)
}
