package main

// The renewal mode (-renewal N): what it costs one process to keep N locks
// alive. It is not a side-by-side comparison: only dlock runs, on one
// dlock.Client over one go-redis client, as a service holding many locks
// would. Issue 19's target: renewal under 5 % of a core for 100,000 locks,
// with a flat goroutine count.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/observe"
	"github.com/redis/go-redis/v9"
)

// renewalResult is one TTL's run.
type renewalResult struct {
	ttl     time.Duration
	locks   int
	acquire time.Duration // wall time to acquire all locks
	release time.Duration // wall time to release them all
	window  time.Duration // measured time, as it actually ran

	roundTrips    int64 // every command or pipeline sent in the window (hooks.go)
	pipelines     int64 // of which pipelines
	pipelineCmds  int64 // commands those pipelines carried: one refresh script per lock renewed
	pipelineMax   time.Duration
	pipelineTotal time.Duration
	renewOK       int64 // OnRenew events with ResultOK in the window
	renewOther    int64 // OnRenew events with ResultLost or ResultError in the window

	clientCPU time.Duration // getrusage(RUSAGE_SELF) user+sys in the window
	serverCPU float64       // redis-server used_cpu_user+sys in the window, seconds
	serverCmd int64         // total_commands_processed in the window (scripts count their commands)
	gcs       uint32        // garbage collections in the window

	goStart, goEnd, goMax int // goroutines at the window's start and end, and the most seen in it

	heapPerLock  float64 // HeapInuse after GC, held minus before, per lock
	redisPerLock float64 // used_memory, held minus before, per lock

	lostEvents int // OnLost events from acquisition to the end of the window
	ctxDone    int // locks whose Context() was done at the end of the window
	relErrs    int // Release calls that failed
}

// renewalCounter is a second go-redis hook beside hooks.go's round-trip
// counter: it counts the commands inside pipelines (the renewal loop sends
// one refresh script per lock in one pipeline per batch) and times the
// pipelines.
type renewalCounter struct {
	pipelines, cmds atomic.Int64
	totalNs, maxNs  atomic.Int64
}

var _ redis.Hook = (*renewalCounter)(nil)

func (h *renewalCounter) reset() {
	h.pipelines.Store(0)
	h.cmds.Store(0)
	h.totalNs.Store(0)
	h.maxNs.Store(0)
}

func (h *renewalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *renewalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *renewalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		d := int64(time.Since(start))
		h.pipelines.Add(1)
		h.cmds.Add(int64(len(cmds)))
		h.totalNs.Add(d)
		for {
			m := h.maxNs.Load()
			if d <= m || h.maxNs.CompareAndSwap(m, d) {
				break
			}
		}
		return err
	}
}

// renewalObserver counts renewals and losses as dlock reports them.
type renewalObserver struct {
	observe.BaseObserver
	ok, other, lost atomic.Int64
}

func (o *renewalObserver) OnRenew(e observe.RenewEvent) {
	if e.Result == observe.ResultOK {
		o.ok.Add(1)
	} else {
		o.other.Add(1)
	}
}

func (o *renewalObserver) OnLost(observe.LostEvent) { o.lost.Add(1) }

// runRenewal is the whole renewal mode: its own redis-server, one run per
// TTL, a table on stdout.
func runRenewal(ctx context.Context, cfg *config) int {
	srv, err := startRedis(ctx, cfg.redisPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer srv.stop()
	fmt.Fprintf(os.Stderr, "redis-server %s on %s\n", srv.version, srv.addr)

	base := runtime.NumGoroutine()
	var results []renewalResult
	failed := false
	for _, ttl := range cfg.renewalTTLs {
		res, err := renewalRun(ctx, cfg, srv, ttl)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: renewal, ttl %v: %v\n", ttl, err)
			failed = true
			break
		}
		results = append(results, res)
	}
	checkGoroutines(base)
	if len(results) > 0 {
		writeRenewal(os.Stdout, cfg, srv, results, ctx.Err() != nil || failed)
	}
	switch {
	case ctx.Err() != nil:
		return 130
	case failed:
		return 1
	}
	return 0
}

// renewalRun acquires cfg.renewal locks with ttl on a fresh client, measures
// for cfg.renewalWindow while holding them, checks none was lost, releases
// them and closes the client.
func renewalRun(ctx context.Context, cfg *config, srv *redisServer, ttl time.Duration) (res renewalResult, err error) {
	res = renewalResult{ttl: ttl, locks: cfg.renewal}
	if err := srv.flush(ctx); err != nil {
		return res, err
	}
	rt := &roundTrips{}
	hook := &renewalCounter{}
	rdb := newGoRedis(srv.addr, rt)
	rdb.AddHook(hook)
	obs := &renewalObserver{}
	client, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		_ = rdb.Close()
		return res, err
	}
	locks := make([]dlock.Lock, cfg.renewal)
	defer func() {
		// Close releases whatever is still held (a run cut short) and
		// stops the renewal loop.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if cerr := client.Close(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("closing the client: %w", cerr)
		}
		cancel()
		_ = rdb.Close()
	}()

	heapBefore := heapInuse()
	memBefore, err := redisUsedMemory(ctx, srv)
	if err != nil {
		return res, err
	}

	fmt.Fprintf(os.Stderr, "ttl %v: acquiring %d locks with %d goroutines...\n", ttl, cfg.renewal, cfg.renewalWorkers)
	start := time.Now()
	err = parallelEach(ctx, cfg.renewal, cfg.renewalWorkers, func(ctx context.Context, i int) error {
		name := "renewal-bench:" + strconv.Itoa(i)
		l, err := client.TryAcquire(ctx, name, dlock.WithTTL(ttl))
		if err != nil {
			return fmt.Errorf("TryAcquire %s: %w", name, err)
		}
		locks[i] = l
		return nil
	})
	res.acquire = time.Since(start)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(os.Stderr, "ttl %v: acquired %d locks in %v (%.0f/s)\n", ttl, cfg.renewal, res.acquire.Round(time.Millisecond), float64(cfg.renewal)/res.acquire.Seconds())
	if res.acquire > ttl/3 {
		fmt.Fprintf(os.Stderr, "ttl %v: note: acquiring took longer than a renewal period (%v); renewals began before the window\n", ttl, ttl/3)
	}

	res.heapPerLock = float64(int64(heapInuse())-int64(heapBefore)) / float64(cfg.renewal)
	memHeld, err := redisUsedMemory(ctx, srv)
	if err != nil {
		return res, err
	}
	res.redisPerLock = float64(memHeld-memBefore) / float64(cfg.renewal)

	if err := measureRenewal(ctx, cfg, srv, rt, hook, obs, &res); err != nil {
		return res, err
	}

	// Lost? The observer saw every loss since acquisition; each lock's
	// context says the same thing from the lock's side (made here, on
	// first use, so it cost nothing during the window).
	res.lostEvents = int(obs.lost.Load())
	for _, l := range locks {
		if l.Context().Err() != nil {
			res.ctxDone++
		}
	}

	fmt.Fprintf(os.Stderr, "ttl %v: releasing...\n", ttl)
	var relErrs atomic.Int64
	start = time.Now()
	err = parallelEach(ctx, cfg.renewal, cfg.renewalWorkers, func(ctx context.Context, i int) error {
		if err := locks[i].Release(ctx); err != nil {
			if relErrs.Add(1) == 1 {
				fmt.Fprintf(os.Stderr, "ttl %v: first failed release: %s: %v\n", ttl, locks[i].Name(), err)
			}
		}
		return nil
	})
	res.release = time.Since(start)
	res.relErrs = int(relErrs.Load())
	fmt.Fprintf(os.Stderr, "ttl %v: released in %v, %d failed\n", ttl, res.release.Round(time.Millisecond), res.relErrs)
	return res, err
}

// measureRenewal holds the locks for cfg.renewalWindow and records what
// renewing them cost. Nothing but the renewal loop uses the client then, so
// every round trip of the window is a renewal pipeline.
func measureRenewal(ctx context.Context, cfg *config, srv *redisServer, rt *roundTrips, hook *renewalCounter, obs *renewalObserver, res *renewalResult) error {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gcBefore := ms.NumGC

	rt.reset()
	hook.reset()
	obs.ok.Store(0)
	obs.other.Store(0)
	srvBefore, err := srv.counters(ctx)
	if err != nil {
		return err
	}
	cpuBefore, err := processCPU()
	if err != nil {
		return err
	}
	var prof *os.File
	if cfg.renewalProfile != "" {
		path := cfg.renewalProfile
		if len(cfg.renewalTTLs) > 1 {
			path += "-" + res.ttl.String()
		}
		if prof, err = os.Create(path); err != nil {
			return err
		}
		defer prof.Close()
		if err := pprof.StartCPUProfile(prof); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "ttl %v: CPU profile of the window to %s\n", res.ttl, path)
	}
	res.goStart = runtime.NumGoroutine()
	res.goMax = res.goStart
	start := time.Now()
	fmt.Fprintf(os.Stderr, "ttl %v: holding for %v...\n", res.ttl, cfg.renewalWindow)

	end := time.NewTimer(cfg.renewalWindow)
	defer end.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	cut := false
wait:
	for {
		select {
		case <-end.C:
			break wait
		case <-ctx.Done():
			cut = true
			break wait
		case <-tick.C:
			res.goMax = max(res.goMax, runtime.NumGoroutine())
		}
	}

	res.window = time.Since(start)
	res.goEnd = runtime.NumGoroutine()
	res.goMax = max(res.goMax, res.goEnd)
	if prof != nil {
		pprof.StopCPUProfile()
	}
	cpuAfter, err := processCPU()
	if err != nil {
		return err
	}
	srvAfter, err := srv.counters(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	res.roundTrips = rt.load()
	res.pipelines = hook.pipelines.Load()
	res.pipelineCmds = hook.cmds.Load()
	res.pipelineTotal = time.Duration(hook.totalNs.Load())
	res.pipelineMax = time.Duration(hook.maxNs.Load())
	res.renewOK = obs.ok.Load()
	res.renewOther = obs.other.Load()
	res.clientCPU = cpuAfter - cpuBefore
	d := srvAfter.sub(srvBefore)
	res.serverCPU, res.serverCmd = d.cpu, d.commands
	runtime.ReadMemStats(&ms)
	res.gcs = ms.NumGC - gcBefore
	if cut {
		return ctx.Err()
	}
	return nil
}

// parallelEach runs fn(i) for i in [0, n) on workers goroutines and returns
// the first error; after it no new i is started.
func parallelEach(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// processCPU is this process's user+system CPU time so far.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// heapAllocs is the count of heap objects the process allocated so far
// (runtime/metrics: no stop of the world, unlike ReadMemStats).
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// heapInuse is HeapInuse after a full collection, so that garbage does not
// count as held memory.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func redisUsedMemory(ctx context.Context, srv *redisServer) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := srv.control.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(infoField(info, "used_memory"), 10, 64)
}

// writeRenewal prints one column per TTL.
func writeRenewal(w io.Writer, cfg *config, srv *redisServer, rs []renewalResult, partial bool) {
	fmt.Fprintf(w, "# Renewal cost: %d locks held by one dlock.Client\n\n", cfg.renewal)
	fmt.Fprintf(w, "%s, Go %s, GOMAXPROCS %d, %d CPUs; redis-server %s on loopback, sharing the cores. "+
		"One go-redis client (default pool), one dlock.Client with default options (renewal on: each lock renewed a third of its TTL after its last lease; "+
		"due locks renewed together in pipelines of at most 1000). Locks taken with TryAcquire by %d goroutines, then held for a measured window of %v; "+
		"nothing else runs in the window.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), srv.version, cfg.renewalWorkers, cfg.renewalWindow)
	if partial {
		fmt.Fprintf(w, "**Partial: the run was interrupted or failed; only the TTLs below completed.**\n\n")
	}
	row := func(label string, f func(r *renewalResult) string) {
		fmt.Fprintf(w, "| %s |", label)
		for i := range rs {
			fmt.Fprintf(w, " %s |", f(&rs[i]))
		}
		fmt.Fprintln(w)
	}
	per := func(r *renewalResult, n float64) float64 { return n / r.window.Seconds() }
	fmt.Fprint(w, "| TTL |")
	for _, r := range rs {
		fmt.Fprintf(w, " %v |", r.ttl)
	}
	fmt.Fprint(w, "\n| --- |")
	for range rs {
		fmt.Fprint(w, " ---: |")
	}
	fmt.Fprintln(w)
	row("locks held", func(r *renewalResult) string { return strconv.Itoa(r.locks) })
	row("acquire all (locks/s)", func(r *renewalResult) string {
		return fmt.Sprintf("%v (%.0f/s)", r.acquire.Round(time.Millisecond), float64(r.locks)/r.acquire.Seconds())
	})
	row("window", func(r *renewalResult) string { return r.window.Round(time.Millisecond).String() })
	row("renewal round trips/s", func(r *renewalResult) string { return fmt.Sprintf("%.1f", per(r, float64(r.roundTrips))) })
	row("locks renewed/s (expected N/(TTL/3))", func(r *renewalResult) string {
		return fmt.Sprintf("%.0f (%.0f)", per(r, float64(r.pipelineCmds)), float64(r.locks)/(r.ttl/3).Seconds())
	})
	row("renewals per pipeline", func(r *renewalResult) string {
		if r.pipelines == 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f", float64(r.pipelineCmds)/float64(r.pipelines))
	})
	row("pipeline time mean / max", func(r *renewalResult) string {
		if r.pipelines == 0 {
			return "–"
		}
		return fmt.Sprintf("%v / %v", (r.pipelineTotal / time.Duration(r.pipelines)).Round(10*time.Microsecond), r.pipelineMax.Round(10*time.Microsecond))
	})
	row("renew events ok / other", func(r *renewalResult) string { return fmt.Sprintf("%d / %d", r.renewOK, r.renewOther) })
	row("**client CPU, % of one core**", func(r *renewalResult) string {
		return fmt.Sprintf("**%.2f %%**", 100*r.clientCPU.Seconds()/r.window.Seconds())
	})
	row("client CPU per renewal", func(r *renewalResult) string { return perRenewal(r, r.clientCPU.Seconds()) })
	row("GCs in the window", func(r *renewalResult) string { return strconv.FormatUint(uint64(r.gcs), 10) })
	row("redis-server CPU, % of one core", func(r *renewalResult) string {
		return fmt.Sprintf("%.2f %%", 100*r.serverCPU/r.window.Seconds())
	})
	row("redis-server CPU per renewal", func(r *renewalResult) string { return perRenewal(r, r.serverCPU) })
	row("server commands per renewal", func(r *renewalResult) string {
		if r.pipelineCmds == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", float64(r.serverCmd)/float64(r.pipelineCmds))
	})
	row("goroutines start → end (max)", func(r *renewalResult) string {
		flat := "flat"
		if r.goEnd != r.goStart || r.goMax != r.goStart {
			flat = "NOT flat"
		}
		return fmt.Sprintf("%d → %d (%d), %s", r.goStart, r.goEnd, r.goMax, flat)
	})
	row("client heap in use per lock", func(r *renewalResult) string { return fmt.Sprintf("%.0f B", r.heapPerLock) })
	row("redis used_memory per lock", func(r *renewalResult) string { return fmt.Sprintf("%.0f B", r.redisPerLock) })
	row("locks lost (OnLost / Context done)", func(r *renewalResult) string { return fmt.Sprintf("%d / %d", r.lostEvents, r.ctxDone) })
	row("release all (failed)", func(r *renewalResult) string {
		return fmt.Sprintf("%v (%d)", r.release.Round(time.Millisecond), r.relErrs)
	})
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Round trips count every command and pipeline the client sent in the window (hooks.go); locks renewed are the commands those pipelines carried "+
		"(one refresh script per lock). Client CPU is getrusage(RUSAGE_SELF) user+sys over the window: the whole process (renewal loop, go-redis, GC, runtime), "+
		"not renewal alone. redis-server CPU is the INFO cpu delta. Heap per lock is HeapInuse after a forced GC, held minus before, over the locks "+
		"(it includes the benchmark's own slice of locks, 16 B each).")
	fmt.Fprintln(w)
}

func perRenewal(r *renewalResult, seconds float64) string {
	if r.pipelineCmds == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f µs", 1e6*seconds/float64(r.pipelineCmds))
}

// parseDurations parses a comma list of TTLs.
func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if d < time.Second || d > time.Hour {
			return nil, fmt.Errorf("%v is not in [1s, 1h]", d)
		}
		out = append(out, d)
	}
	return out, nil
}
