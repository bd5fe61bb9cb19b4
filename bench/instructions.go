package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Instruction mode (-instructions N) counts what a cycle costs Redis in
// machine instructions, not seconds: redis-server runs under valgrind's
// callgrind, and only the N uncontended cycles of each library are counted
// (counting is switched on after the warm-up, once the server is quiet,
// and off before the clients close). The count is the same within about 3 %
// from run to run for the same binary and workload, so a change to a script
// shows as a number, where Redis's CPU seconds on two shared cores differ
// by tens of percent between runs. It measures Redis only, in user space:
// the client runs at full speed and is not counted, nor is the kernel's
// work for each round trip.
//
// What scales with wall time rather than with the cycles, and so weighs
// more here (valgrind runs Redis about 30 times slower): serverCron,
// jemalloc's background thread, and the active expiry of keys the cycles
// leave (release records, once a count runs longer than their lifetime).

// slowServerTimeout is 0 (the library's default) for a library's own
// per-attempt timeout, or -wait in the instruction mode: under valgrind a
// round trip takes milliseconds, and far longer right after counting
// starts, when valgrind translates the code again. A timed-out attempt
// would be counted with its retry; the count depends on a cycle
// completing, not on how long it takes.
func slowServerTimeout(cfg *config) time.Duration {
	if cfg.instructions > 0 {
		return cfg.wait
	}
	return 0
}

// instrResult is one library's count at one G.
type instrResult struct {
	cycles   int64
	instr    int64 // instructions of redis-server over the counted cycles
	commands int64 // server commands over them (scripts' commands included)
	err      error
}

func runInstructions(ctx context.Context, cfg *config, libs []library) int {
	vgdb, err := findVgdb(cfg.valgrind)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	results := map[int]map[string]instrResult{}
	failed := false
	for _, g := range cfg.gs {
		results[g] = map[string]instrResult{}
		for _, lib := range libs {
			if ctx.Err() != nil {
				return 130
			}
			start := time.Now()
			res := countCycles(ctx, cfg, vgdb, lib, g)
			results[g][lib.name] = res
			if res.err != nil {
				failed = true
				fmt.Fprintf(os.Stderr, "G=%d %-14s FAILED: %v\n", g, lib.name, res.err)
				continue
			}
			fmt.Fprintf(os.Stderr, "G=%d %-14s %d cycles, %.0f instructions/cycle (%v)\n",
				g, lib.name, res.cycles, float64(res.instr)/float64(res.cycles), time.Since(start).Round(time.Second))
		}
	}
	writeInstructions(os.Stdout, cfg, libs, results)
	if failed {
		return 1 // the table says which; a script reading it must not miss it
	}
	return 0
}

// findVgdb checks that valgrind is there and returns the path of vgdb,
// which comes with it and switches callgrind's counting on and off.
// (callgrind_control wraps vgdb, but exits 0 when it finds no such
// process, so a count that never started would read as one.)
func findVgdb(valgrind string) (string, error) {
	if _, err := exec.LookPath(valgrind); err != nil {
		return "", fmt.Errorf("-instructions needs valgrind (%w): apt-get install valgrind", err)
	}
	vgdb, err := exec.LookPath("vgdb")
	if err != nil {
		return "", fmt.Errorf("-instructions needs vgdb, from valgrind's package (%w)", err)
	}
	return vgdb, nil
}

// countCycles runs about cfg.instructions cycles of lib on g goroutines
// (a whole number per goroutine) against a redis-server of its own under
// callgrind, and reads the server's count.
func countCycles(ctx context.Context, cfg *config, vgdb string, lib library, g int) instrResult {
	dir, err := os.MkdirTemp("", "dlock-bench-callgrind-")
	if err != nil {
		return instrResult{err: err}
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "callgrind.out")
	// vgdb's FIFOs in dir too: they are left behind when valgrind is killed.
	prefix := "--vgdb-prefix=" + filepath.Join(dir, "vgdb")
	srv, err := startRedisUnder(ctx, cfg.redisPath, []string{cfg.valgrind, "--tool=callgrind",
		"--instr-atstart=no", "--callgrind-out-file=" + out, prefix}, 60*time.Second)
	if err != nil {
		return instrResult{err: err}
	}
	defer srv.stop()

	e := &cellEnv{addr: srv.addr, cfg: cfg, rt: &roundTrips{}}
	lockers, closeAll, err := lib.open(e, shared, g)
	if err != nil {
		return instrResult{err: fmt.Errorf("open: %w", err)}
	}
	closed := false
	defer func() {
		if !closed {
			closeAll()
		}
	}()
	per := max(cfg.instructions/int64(g), 1)
	// Warm-up, uncounted: connections dialled, scripts loaded, a first
	// lock of each name (and its fence counter) made; then whatever the
	// library does once in the background (dlock's server check) done.
	if err := cycles(ctx, cfg, lockers, 3); err != nil {
		return instrResult{err: fmt.Errorf("warm-up: %w", err)}
	}
	if err := srv.waitQuiet(ctx, 30*time.Second); err != nil {
		return instrResult{err: fmt.Errorf("warm-up: %w", err)}
	}
	// Server commands over the same window: a retried attempt or a
	// library's background command counted with the cycles shows there.
	before, err := srv.counters(ctx)
	if err != nil {
		return instrResult{err: err}
	}
	pid := strconv.Itoa(srv.cmd.Process.Pid)
	if err := instrumentation(ctx, vgdb, prefix, pid, "on"); err != nil {
		return instrResult{err: err}
	}
	err = cycles(ctx, cfg, lockers, per)
	if ierr := instrumentation(ctx, vgdb, prefix, pid, "off"); err == nil {
		err = ierr
	}
	if err != nil {
		return instrResult{err: fmt.Errorf("counted cycles: %w", err)}
	}
	after, err := srv.counters(ctx)
	if err != nil {
		return instrResult{err: err}
	}
	closed = true
	closeAll()
	if err := srv.shutdown(ctx, 60*time.Second); err != nil {
		return instrResult{err: err}
	}
	n, err := callgrindTotal(out)
	if err == nil && n == 0 {
		err = fmt.Errorf("%s: callgrind counted nothing", out)
	}
	if err == nil && cfg.callgrindDir != "" {
		err = keepFile(out, filepath.Join(cfg.callgrindDir, fmt.Sprintf("%s-g%d.callgrind", lib.name, g)))
	}
	return instrResult{cycles: per * int64(len(lockers)), instr: n, commands: after.sub(before).commands, err: err}
}

// cycles runs n acquire-release cycles on each locker, each on a name of
// its own, all at once, as the uncontended scenario does; a locker stops
// at its first error, and the errors are returned together.
func cycles(ctx context.Context, cfg *config, lockers []locker, n int64) error {
	var wg sync.WaitGroup
	errs := make([]error, len(lockers))
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("bench:instr:%d", i)
			for range n {
				actx, cancel := context.WithTimeout(ctx, cfg.wait)
				release, err := l.Acquire(actx, name)
				cancel()
				if err != nil {
					errs[i] = err
					return
				}
				rctx, rcancel := context.WithTimeout(context.Background(), max(releaseTimeout, slowServerTimeout(cfg)))
				err = release(rctx)
				rcancel()
				if err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// instrumentation switches callgrind's counting in process pid to state
// ("on" or "off") through vgdb, then asks for the state back: vgdb, too,
// can end without an error when the command did not arrive.
func instrumentation(ctx context.Context, vgdb, prefix, pid, state string) error {
	for _, args := range [][]string{{"instrumentation", state}, {"instrumentation"}} {
		out, err := runVgdb(ctx, vgdb, append([]string{prefix, "--pid=" + pid}, args...))
		if err != nil {
			return err
		}
		if len(args) == 1 && !strings.Contains(out, "instrumentation: "+state) {
			return fmt.Errorf("vgdb: callgrind's counting in pid %s did not switch %s: %s", pid, state, tail(out, 400))
		}
	}
	return nil
}

func runVgdb(ctx context.Context, vgdb string, args []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, vgdb, args...)
	cmd.WaitDelay = time.Second // a child holding the output open must not hold us
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("vgdb %s: %w: %s", strings.Join(args, " "), err, tail(string(out), 400))
	}
	return string(out), nil
}

// callgrindTotal reads the instruction count of a callgrind output file
// (its "summary:" line, or "totals:").
func callgrindTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64 = -1
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range []string{"summary:", "totals:"} {
			if v, ok := strings.CutPrefix(line, p); ok {
				if n, err := strconv.ParseInt(strings.Fields(v + " 0")[0], 10, 64); err == nil && n > total {
					total = n
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if total < 0 {
		return 0, fmt.Errorf("%s: no summary or totals line", path)
	}
	return total, nil
}

func writeInstructions(w io.Writer, cfg *config, libs []library, results map[int]map[string]instrResult) {
	fmt.Fprintf(w, "## Redis instructions per uncontended cycle (callgrind)\n\n")
	fmt.Fprintf(w, "About %d cycles per library and G (a whole number per goroutine), one shared client, each goroutine on its own name; "+
		"instructions of redis-server %s under `valgrind --tool=callgrind`, counted over those cycles only.\n\n",
		cfg.instructions, redisVersion(cfg))
	fmt.Fprintln(w, "| G | library | cycles | server cmds/cycle | instructions/cycle | vs raw |")
	fmt.Fprintln(w, "|---:|:---|---:|---:|---:|---:|")
	for _, g := range cfg.gs {
		raw, hasRaw := results[g]["raw"]
		for _, lib := range libs {
			r := results[g][lib.name]
			if r.err != nil || r.cycles == 0 {
				fmt.Fprintf(w, "| %d | %s | | | failed | |\n", g, lib.name)
				continue
			}
			per := float64(r.instr) / float64(r.cycles)
			ratio := ""
			if hasRaw && raw.err == nil && raw.instr > 0 {
				ratio = fmt.Sprintf("%.2f×", per/(float64(raw.instr)/float64(raw.cycles)))
			}
			fmt.Fprintf(w, "| %d | %s | %d | %.2f | %.0f | %s |\n", g, lib.name, r.cycles, float64(r.commands)/float64(r.cycles), per, ratio)
		}
	}
}

// redisVersion is what the server binary says of itself ("7.0.15"), or
// its path when it does not say.
func redisVersion(cfg *config) string {
	out, err := exec.Command(cfg.redisPath, "--version").Output()
	if err != nil {
		return cfg.redisPath
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(string(out))
}

// keepFile copies the callgrind file at from to to.
func keepFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}
