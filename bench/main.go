// Command bench compares Go Redis lock libraries side by side against one
// throwaway redis-server it starts itself on a loopback port.
//
//	cd bench && go run . [flags]
//
// Every library runs every cell in the same run, in interleaved order
// (each repetition runs all libraries on a cell before moving on, and the
// library order rotates between repetitions), so slow drift of the machine
// hits all of them alike; tables show the median over repetitions. See
// scenarios.go for what each scenario measures and hooks.go for what a
// round trip is.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config holds the flags.
type config struct {
	duration   time.Duration
	reps       int
	ttl        time.Duration
	wait       time.Duration
	hold       time.Duration
	pause      time.Duration
	contenders int
	gs         []int
	scenarios  map[scenario]bool
	libs       string
	rawRetry   time.Duration
	maxOps     int64
	redisPath  string

	// The renewal mode (renewal.go): on when renewal > 0.
	renewal        int
	renewalTTLs    []time.Duration
	renewalWindow  time.Duration
	renewalWorkers int
	renewalProfile string

	// The instruction mode (instructions.go): on when instructions > 0.
	instructions int64
	valgrind     string
	callgrindDir string
}

func parseFlags(args []string) (*config, error) {
	cfg := &config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.DurationVar(&cfg.duration, "duration", 1500*time.Millisecond, "measured time per cell (one library, one configuration, one repetition)")
	fs.IntVar(&cfg.reps, "reps", 3, "repetitions; tables show the median")
	fs.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "lock TTL / validity for every library")
	fs.DurationVar(&cfg.wait, "wait", 5*time.Second, "upper bound on one Acquire call's wait")
	fs.DurationVar(&cfg.hold, "hold", time.Millisecond, "contended/hand-off: how long the lock is held")
	fs.DurationVar(&cfg.pause, "pause", 5*time.Millisecond, "hand-off: pause after releasing before trying again")
	fs.IntVar(&cfg.contenders, "contenders", 32, "contended/hand-off: goroutines on the one lock")
	gs := fs.String("g", "1,16,64", "uncontended: goroutine counts, comma-separated")
	scs := fs.String("scenarios", "uncontended,contended,handoff", "scenarios to run, comma-separated")
	fs.StringVar(&cfg.libs, "libs", "", "libraries to run, comma-separated, in table order (default: all non-optional; known: "+strings.Join(libraryNames(), ", ")+")")
	fs.DurationVar(&cfg.rawRetry, "raw-retry", 0, "raw baseline: sleep between failed attempts (0 = retry at once)")
	fs.Int64Var(&cfg.maxOps, "max-ops", 2_000_000, "upper bound on acquire attempts per cell")
	fs.StringVar(&cfg.redisPath, "redis-server", "/usr/bin/redis-server", "redis-server binary")
	fs.IntVar(&cfg.renewal, "renewal", 0, "renewal mode: hold this many locks on one dlock.Client and measure renewal's cost (the other scenarios do not run)")
	rttls := fs.String("renewal-ttl", "30s", "renewal mode: lock TTLs, comma-separated, one run each")
	fs.DurationVar(&cfg.renewalWindow, "renewal-window", 20*time.Second, "renewal mode: measured time while holding the locks")
	fs.IntVar(&cfg.renewalWorkers, "renewal-workers", 64, "renewal mode: goroutines acquiring and releasing the locks")
	fs.Int64Var(&cfg.instructions, "instructions", 0, "instruction mode: count redis-server's instructions (valgrind's callgrind) over this many uncontended cycles per library and -g value (the other scenarios do not run)")
	fs.StringVar(&cfg.valgrind, "valgrind", "valgrind", "instruction mode: valgrind binary")
	fs.StringVar(&cfg.callgrindDir, "callgrind-out", "", "instruction mode: keep each count's callgrind file in this directory (<library>-g<G>.callgrind), for callgrind_annotate")
	fs.StringVar(&cfg.renewalProfile, "renewal-cpuprofile", "", "renewal mode: write a CPU profile of the measured window to this file (-<ttl> appended with several TTLs)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if cfg.renewal != 0 {
		var err error
		if cfg.renewalTTLs, err = parseDurations(*rttls); err != nil {
			return nil, fmt.Errorf("-renewal-ttl: %w", err)
		}
		switch {
		case cfg.renewal < 1 || cfg.renewal > 10_000_000:
			return nil, errors.New("-renewal must be in [1, 10000000]")
		case cfg.renewalWindow <= 0 || cfg.renewalWindow > 10*time.Minute:
			return nil, errors.New("-renewal-window must be in (0, 10m]")
		case cfg.renewalWorkers < 1 || cfg.renewalWorkers > 4096:
			return nil, errors.New("-renewal-workers must be in [1, 4096]")
		}
		return cfg, nil
	}
	var err error
	if cfg.gs, err = parseInts(*gs); err != nil {
		return nil, fmt.Errorf("-g: %w", err)
	}
	if cfg.instructions != 0 {
		if cfg.instructions < 1 || cfg.instructions > 1_000_000 {
			return nil, errors.New("-instructions must be in [1, 1000000]")
		}
		switch {
		case cfg.wait <= 0:
			return nil, errors.New("-wait must be positive")
		case cfg.ttl < 100*time.Millisecond:
			return nil, errors.New("-ttl must be at least 100ms")
		}
		return cfg, nil
	}
	cfg.scenarios = map[scenario]bool{}
	for _, s := range strings.Split(*scs, ",") {
		switch sc := scenario(strings.TrimSpace(s)); sc {
		case uncontended, contended, handoff:
			cfg.scenarios[sc] = true
		default:
			return nil, fmt.Errorf("-scenarios: unknown %q", s)
		}
	}
	switch {
	case cfg.duration <= 0 || cfg.duration > 10*time.Minute:
		return nil, errors.New("-duration must be in (0, 10m]")
	case cfg.reps < 1 || cfg.reps > 100:
		return nil, errors.New("-reps must be in [1, 100]")
	case cfg.ttl < 100*time.Millisecond:
		return nil, errors.New("-ttl must be at least 100ms")
	case cfg.wait <= 0:
		return nil, errors.New("-wait must be positive")
	case cfg.hold < 0 || cfg.hold >= cfg.ttl/2:
		return nil, errors.New("-hold must be in [0, ttl/2)")
	case cfg.pause < 0 || cfg.rawRetry < 0:
		return nil, errors.New("-pause and -raw-retry must not be negative")
	case cfg.contenders < 2 || cfg.contenders > 1024:
		return nil, errors.New("-contenders must be in [2, 1024]")
	case cfg.maxOps < 1:
		return nil, errors.New("-max-ops must be positive")
	}
	return cfg, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("%q is not a count in [1, 1024]", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// plan lists the cells in run order within one repetition.
func (cfg *config) plan() []cellSpec {
	var specs []cellSpec
	if cfg.scenarios[uncontended] {
		for _, g := range cfg.gs {
			specs = append(specs, cellSpec{scenario: uncontended, layout: shared, g: g})
		}
	}
	for _, sc := range []scenario{contended, handoff} {
		if cfg.scenarios[sc] {
			for _, lay := range []layout{shared, separate} {
				specs = append(specs, cellSpec{scenario: sc, layout: lay, g: cfg.contenders})
			}
		}
	}
	return specs
}

func main() {
	os.Exit(run(os.Args[1:]))
}

// run is main with an exit code, so deferred clean-up (the redis-server)
// happens on every path, including Ctrl-C, which cancels ctx.
func run(args []string) int {
	cfg, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if cfg.renewal > 0 {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runRenewal(ctx, cfg)
	}
	libs, err := selectLibraries(cfg.libs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.instructions > 0 {
		return runInstructions(ctx, cfg, libs)
	}

	srv, err := startRedis(ctx, cfg.redisPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer srv.stop()
	fmt.Fprintf(os.Stderr, "redis-server %s on %s\n", srv.version, srv.addr)

	var ok []library
	for _, lib := range libs {
		if err := selfCheck(ctx, cfg, srv, lib); err != nil {
			fmt.Fprintf(os.Stderr, "self-check %s FAILED, skipping it: %v\n", lib.name, err)
			continue
		}
		ok = append(ok, lib)
	}
	if ctx.Err() != nil || len(ok) == 0 {
		fmt.Fprintln(os.Stderr, "bench: nothing to run")
		return 1
	}

	baseGoroutines := runtime.NumGoroutine()
	rep := newReport(cfg, srv, ok)
	specs := cfg.plan()
	total := cfg.reps * len(specs) * len(ok)
	done := 0
	runStart := time.Now()
run:
	for r := range cfg.reps {
		for _, spec := range specs {
			for i := range ok {
				lib := ok[(i+r)%len(ok)] // rotate the order between reps
				if ctx.Err() != nil {
					break run
				}
				res := runCell(ctx, cfg, srv, lib, spec, done)
				if ctx.Err() != nil {
					break run // a cell cut short by Ctrl-C is not a result
				}
				done++
				rep.add(spec, lib.name, res)
				fmt.Fprintf(os.Stderr, "[%3d/%d] rep %d/%d %-26s %-14s %s\n",
					done, total, r+1, cfg.reps, spec, lib.name, progressLine(spec, &res))
			}
		}
	}
	interrupted := ctx.Err() != nil
	if interrupted {
		fmt.Fprintf(os.Stderr, "interrupted after %d of %d cells; reporting what ran\n", done, total)
	}
	fmt.Fprintf(os.Stderr, "%d cells in %v\n", done, time.Since(runStart).Round(time.Second))
	checkGoroutines(baseGoroutines)
	rep.write(os.Stdout, interrupted)
	if interrupted {
		return 130
	}
	return 0
}

// checkGoroutines warns if goroutines started by the cells outlive them:
// every cell must close its clients and stop its workers, and a library
// that leaks background goroutines would also skew the cells after it.
// Closed clients may need a moment to wind down, so it waits up to 2 s.
func checkGoroutines(base int) {
	deadline := time.Now().Add(2 * time.Second)
	n := runtime.NumGoroutine()
	for n > base && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	if n > base {
		fmt.Fprintf(os.Stderr, "warning: %d goroutines left after the cells, %d before them\n", n, base)
		return
	}
	fmt.Fprintf(os.Stderr, "goroutines: %d before the cells, %d after (no leak)\n", base, n)
}
