package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// scenario names one of the three workloads.
type scenario string

const (
	// uncontended: G goroutines, each on its own lock name, acquire and
	// release in a loop. Measures the fixed cost of a lock: latency of the
	// two calls, and how it scales with concurrency on one client.
	uncontended scenario = "uncontended"
	// contended: N goroutines on one name, hold for -hold, try again at once
	// after release. Measures throughput of a busy lock, fairness (slowest
	// wait) and what waiting costs Redis.
	contended scenario = "contended"
	// handoff: as contended, but after releasing, a goroutine pauses for
	// -pause, so the lock always goes to someone already waiting. Measures
	// how fast a waiter notices a release (the release → acquire gap).
	handoff scenario = "handoff"
)

const (
	// releaseTimeout bounds a release. Releases run on a context of their
	// own, not the cell's, so a lock held when the cell ends is still
	// released rather than left to expire.
	releaseTimeout = 2 * time.Second
	// closeTimeout bounds closing a library client.
	closeTimeout = 2 * time.Second
	// maxFailuresPerWorker stops a goroutine whose library keeps erroring,
	// so a broken adapter cannot spin for the whole cell.
	maxFailuresPerWorker = 100
	// maxGapRecords bounds the per-cell acquisition log used for gaps.
	maxGapRecords = 1 << 20
)

// cellSpec is one measured configuration, run once per library per rep.
type cellSpec struct {
	scenario scenario
	layout   layout // shared for uncontended
	g        int    // goroutines
}

func (s cellSpec) String() string {
	if s.scenario == uncontended {
		return fmt.Sprintf("uncontended G=%d", s.g)
	}
	return fmt.Sprintf("%s/%s G=%d", s.scenario, s.layout, s.g)
}

// cellResult is what one library did in one cell.
type cellResult struct {
	err      error // the cell could not run (setup or counters failed)
	ops      int64 // acquire+release cycles completed
	elapsed  time.Duration
	acquire  durations     // uncontended: Acquire call latency
	release  durations     // uncontended: release call latency
	waits    durations     // contended/handoff: Acquire call start → success
	cutoff   time.Duration // longest wait still pending when the cell ended
	gaps     durations     // handoff: release end → next acquire success
	gaveUp   int64         // Acquire gave up (library limit or -wait)
	failures int64         // other errors from Acquire or release
	lost     int64         // release said the lock was no longer held
	overlaps int64         // a goroutine acquired while another held the lock
	firstErr error
	rt       int64          // client round trips in the measured window
	server   serverCounters // Redis CPU and commands in the measured window
	// clientCPU is this process's CPU time (user+sys) in the measured
	// window, seconds: the library under test, go-redis and the runtime
	// (one library runs at a time).
	clientCPU float64
	// spread is how unevenly the goroutines of a contended cell got the
	// lock: (most − fewest acquisitions of one goroutine) / the mean; 0 is
	// perfectly even, -1 not measured (uncontended: each has its own lock).
	spread float64
	// allocs is the heap objects this process allocated in the measured
	// window: the library, go-redis and this harness's bookkeeping.
	allocs uint64
}

func (r *cellResult) throughput() float64 {
	if r.err != nil || r.elapsed <= 0 {
		return -1
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// perOp divides a cell total by the completed cycles.
func (r *cellResult) perOp(total float64) float64 {
	if r.err != nil || r.ops == 0 {
		return -1
	}
	return total / float64(r.ops)
}

// slowestWait is the longest single wait, counting waits cut off by the end
// of the cell (a lower bound for those), so a starved goroutine shows.
func (r *cellResult) slowestWait() time.Duration {
	return max(r.waits.max(), r.cutoff)
}

// Each worker goroutine tallies into a cellResult of its own, merged after
// the cell, so the measured loop shares nothing but a few atomics.

func (w *cellResult) fail(err error) {
	w.failures++
	if w.firstErr == nil {
		w.firstErr = err
	}
}

func (r *cellResult) merge(w *cellResult) {
	r.ops += w.ops
	r.acquire = append(r.acquire, w.acquire...)
	r.release = append(r.release, w.release...)
	r.waits = append(r.waits, w.waits...)
	r.cutoff = max(r.cutoff, w.cutoff)
	r.gaveUp += w.gaveUp
	r.failures += w.failures
	r.lost += w.lost
	if r.firstErr == nil {
		r.firstErr = w.firstErr
	}
}

// runCell runs lib in one cell: builds its lockers, warms them up, reads
// the server counters, runs the workers for cfg.duration (or cfg.maxOps
// cycles), reads the counters again and closes everything.
func runCell(ctx context.Context, cfg *config, srv *redisServer, lib library, spec cellSpec, cellID int) (res cellResult) {
	prefix := fmt.Sprintf("bench:%d:%s", cellID, lib.name)
	if err := srv.flush(ctx); err != nil {
		return cellResult{err: err}
	}
	env := &cellEnv{addr: srv.addr, cfg: cfg, rt: &roundTrips{}}
	lockers, closeAll, err := lib.open(env, spec.layout, spec.g)
	if err != nil {
		return cellResult{err: fmt.Errorf("open: %w", err)}
	}
	defer closeAll()
	if err := warmUp(ctx, lockers, prefix); err != nil {
		return cellResult{err: fmt.Errorf("warm-up: %w", err)}
	}
	runtime.GC() // start every cell with the previous cells' garbage gone

	before, err := srv.counters(ctx)
	if err != nil {
		return cellResult{err: err}
	}
	env.rt.reset()
	cpuBefore, err := processCPU()
	allocsBefore := heapAllocs()
	if err != nil {
		return cellResult{err: err}
	}
	cellCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()

	var budget atomic.Int64 // bounds the cycles of all workers together
	budget.Store(cfg.maxOps)
	records := make([]cellResult, spec.g)
	var wg sync.WaitGroup
	start := time.Now()
	var log *acquisitionLog
	if spec.scenario == uncontended {
		for i := range spec.g {
			wg.Go(func() {
				uncontendedWorker(cellCtx, cfg, lockers[i], fmt.Sprintf("%s:%d", prefix, i), &budget, &records[i])
			})
		}
	} else {
		log = newAcquisitionLog(start, cfg.maxOps)
		for i := range spec.g {
			wg.Go(func() {
				contendedWorker(cellCtx, cfg, spec.scenario, lockers[i], prefix+":shared", &budget, log, &records[i])
			})
		}
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.rt = env.rt.load()
	cpuAfter, err := processCPU()
	if err != nil {
		return cellResult{err: err}
	}
	res.clientCPU = (cpuAfter - cpuBefore).Seconds()
	res.allocs = heapAllocs() - allocsBefore
	after, err := srv.counters(ctx)
	if err != nil {
		return cellResult{err: err}
	}
	res.server = after.sub(before)
	for i := range records {
		res.merge(&records[i])
	}
	res.spread = -1
	if spec.scenario != uncontended {
		res.spread = spread(records)
	}
	if log != nil {
		res.overlaps = log.overlaps.Load()
		if spec.scenario == handoff {
			res.gaps = log.gaps()
		}
	}
	return res
}

// spread is (max − min) / mean of the workers' completed acquisitions, or
// -1 when none completed any.
func spread(records []cellResult) float64 {
	if len(records) == 0 {
		return -1
	}
	lo, hi, sum := records[0].ops, records[0].ops, int64(0)
	for i := range records {
		lo, hi, sum = min(lo, records[i].ops), max(hi, records[i].ops), sum+records[i].ops
	}
	if sum == 0 {
		return -1
	}
	return float64(hi-lo) / (float64(sum) / float64(len(records)))
}

// warmUp makes one TryAcquire+release per locker, all at once, so
// connections are dialled, scripts loaded and tracking set up before the
// measured window, and a shared pool holds as many connections as the cell
// will use concurrently.
func warmUp(ctx context.Context, lockers []locker, prefix string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	errs := make([]error, len(lockers))
	var wg sync.WaitGroup
	for i, l := range lockers {
		wg.Go(func() {
			release, err := l.TryAcquire(ctx, fmt.Sprintf("%s:warm:%d", prefix, i))
			if err == nil {
				err = release(ctx)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// uncontendedWorker acquires and releases its own name until the cell ends.
func uncontendedWorker(cellCtx context.Context, cfg *config, l locker, name string, budget *atomic.Int64, rec *cellResult) {
	for cellCtx.Err() == nil && budget.Add(-1) >= 0 && rec.failures < maxFailuresPerWorker {
		actx, cancel := context.WithTimeout(cellCtx, cfg.wait)
		t0 := time.Now()
		release, err := l.Acquire(actx, name)
		t1 := time.Now()
		cancel()
		if err != nil {
			if cellCtx.Err() != nil {
				return
			}
			rec.fail(err)
			continue
		}
		rctx, rcancel := context.WithTimeout(context.Background(), releaseTimeout)
		err = release(rctx)
		t2 := time.Now()
		rcancel()
		rec.acquire = append(rec.acquire, t1.Sub(t0))
		rec.release = append(rec.release, t2.Sub(t1))
		rec.noteRelease(err)
		rec.ops++
	}
}

// contendedWorker competes for one shared name until the cell ends. In the
// handoff scenario it pauses after each release.
func contendedWorker(cellCtx context.Context, cfg *config, sc scenario, l locker, name string, budget *atomic.Int64, log *acquisitionLog, rec *cellResult) {
	for cellCtx.Err() == nil && budget.Add(-1) >= 0 && rec.failures < maxFailuresPerWorker {
		actx, cancel := context.WithTimeout(cellCtx, cfg.wait)
		t0 := time.Now()
		release, err := l.Acquire(actx, name)
		t1 := time.Now()
		cancel()
		if err != nil {
			switch {
			case cellCtx.Err() != nil:
				rec.cutoff = max(rec.cutoff, t1.Sub(t0))
				return
			case errors.Is(err, errNotObtained), errors.Is(err, context.DeadlineExceeded):
				rec.gaveUp++
			default:
				rec.fail(err)
			}
			continue
		}
		seq := log.acquired(t1)
		rec.waits = append(rec.waits, t1.Sub(t0))
		time.Sleep(cfg.hold)
		log.releasing()
		rctx, rcancel := context.WithTimeout(context.Background(), releaseTimeout)
		err = release(rctx)
		rcancel()
		log.released(seq, time.Now())
		rec.noteRelease(err)
		rec.ops++
		if sc == handoff && sleepCtx(cellCtx, cfg.pause) != nil {
			return
		}
	}
}

func (w *cellResult) noteRelease(err error) {
	switch {
	case err == nil:
	case errors.Is(err, errLost):
		w.lost++
	default:
		w.fail(err)
	}
}

// acquisitionLog records, for the acquisitions of one contended cell in
// lock order, when each was acquired and when its release returned, on the
// process-wide monotonic clock (all goroutines are in this process, so
// their timestamps are comparable). Entry k+1's acquire minus entry k's
// release end is the hand-off gap. The sequence number is taken while
// holding the lock, so it follows lock order as long as the lock excludes;
// the holder count checks that it does.
type acquisitionLog struct {
	start    time.Time
	seq      atomic.Int64
	holders  atomic.Int32
	overlaps atomic.Int64
	acqAt    []int64 // ns since start; 0 = not recorded
	relEnd   []int64
}

func newAcquisitionLog(start time.Time, maxOps int64) *acquisitionLog {
	n := int(min(maxOps, maxGapRecords))
	return &acquisitionLog{start: start, acqAt: make([]int64, n), relEnd: make([]int64, n)}
}

func (a *acquisitionLog) acquired(at time.Time) int64 {
	if a.holders.Add(1) != 1 {
		a.overlaps.Add(1)
	}
	seq := a.seq.Add(1) - 1
	if seq < int64(len(a.acqAt)) {
		a.acqAt[seq] = int64(at.Sub(a.start))
	}
	return seq
}

// releasing is called before the release call, while the lock is still
// held, so the next holder cannot see a stale holder count.
func (a *acquisitionLog) releasing() { a.holders.Add(-1) }

func (a *acquisitionLog) released(seq int64, at time.Time) {
	if seq < int64(len(a.relEnd)) {
		a.relEnd[seq] = int64(at.Sub(a.start))
	}
}

// gaps returns release end → next acquire for every consecutive pair that
// was recorded. A gap can come out slightly negative when the next holder's
// reply arrives before the releaser's; those count as 0.
func (a *acquisitionLog) gaps() durations {
	n := min(a.seq.Load(), int64(len(a.acqAt)))
	var out durations
	for k := int64(1); k < n; k++ {
		if a.relEnd[k-1] == 0 || a.acqAt[k] == 0 {
			continue
		}
		out = append(out, time.Duration(max(0, a.acqAt[k]-a.relEnd[k-1])))
	}
	return out
}
