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
// (instrumentation is switched on after the warm-up and off before the
// server stops). The count is the same from run to run for the same binary
// and workload, whatever else the machine is doing, so a change to a script
// shows as a number, where Redis's CPU seconds on two shared cores differ
// by tens of percent between runs. It measures Redis only: the client runs
// at full speed and is not counted.
//
// What it leaves out: time (valgrind runs Redis about 30 times slower, so
// serverCron's share is larger than in a real run) and cache effects. What
// it includes besides the scripts: reading and parsing each request, and
// Redis's active expiry of the keys the cycles leave (release records).

// slowServerTimeout is 0 (the library's default) for a library's own
// per-attempt timeout, or -wait in the instruction mode, where Redis runs
// under valgrind and a round trip takes tens of milliseconds: the count
// does not depend on how long a cycle takes, only that it completes.
func slowServerTimeout(cfg *config) time.Duration {
	if cfg.instructions > 0 {
		return cfg.wait
	}
	return 0
}

// instrResult is one library's count at one G.
type instrResult struct {
	cycles int64
	instr  int64 // instructions of redis-server over the counted cycles
	err    error
}

func runInstructions(ctx context.Context, cfg *config, libs []library) int {
	control, err := findCallgrind(cfg.valgrind)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	results := map[int]map[string]instrResult{}
	for _, g := range cfg.gs {
		results[g] = map[string]instrResult{}
		for _, lib := range libs {
			if ctx.Err() != nil {
				return 130
			}
			start := time.Now()
			res := countCycles(ctx, cfg, control, lib, g)
			results[g][lib.name] = res
			if res.err != nil {
				fmt.Fprintf(os.Stderr, "G=%d %-14s FAILED: %v\n", g, lib.name, res.err)
				continue
			}
			fmt.Fprintf(os.Stderr, "G=%d %-14s %d cycles, %.0f instructions/cycle (%v)\n",
				g, lib.name, res.cycles, float64(res.instr)/float64(res.cycles), time.Since(start).Round(time.Second))
		}
	}
	writeInstructions(os.Stdout, cfg, libs, results)
	return 0
}

// findCallgrind checks that valgrind runs and returns the path of
// callgrind_control, which comes with it.
func findCallgrind(valgrind string) (string, error) {
	if _, err := exec.LookPath(valgrind); err != nil {
		return "", fmt.Errorf("-instructions needs valgrind (%w): apt-get install valgrind", err)
	}
	control, err := exec.LookPath("callgrind_control")
	if err != nil {
		return "", fmt.Errorf("-instructions needs callgrind_control, from valgrind's package (%w)", err)
	}
	return control, nil
}

// countCycles runs cfg.instructions cycles of lib on g goroutines against a
// redis-server of its own under callgrind, and reads the server's count.
func countCycles(ctx context.Context, cfg *config, control string, lib library, g int) instrResult {
	dir, err := os.MkdirTemp("", "dlock-bench-callgrind-")
	if err != nil {
		return instrResult{err: err}
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "callgrind.out")
	srv, err := startRedisUnder(ctx, cfg.redisPath, []string{cfg.valgrind, "--tool=callgrind",
		"--instr-atstart=no", "--callgrind-out-file=" + out}, 60*time.Second)
	if err != nil {
		return instrResult{err: err}
	}
	defer srv.stop()

	e := &cellEnv{addr: srv.addr, cfg: cfg, rt: &roundTrips{}}
	lockers, closeAll, err := lib.open(e, shared, g)
	if err != nil {
		return instrResult{err: err}
	}
	defer closeAll()
	per := max(cfg.instructions/int64(g), 1)
	// Warm-up, uncounted: connections dialled, scripts loaded, a first
	// lock of each name (and its fence counter) made.
	if err := cycles(ctx, cfg, lockers, 3); err != nil {
		return instrResult{err: fmt.Errorf("warm-up: %w", err)}
	}
	pid := strconv.Itoa(srv.cmd.Process.Pid)
	if err := callgrindControl(ctx, control, dir, "--instr=on", pid); err != nil {
		return instrResult{err: err}
	}
	err = cycles(ctx, cfg, lockers, per)
	if cerr := callgrindControl(ctx, control, dir, "--instr=off", pid); err == nil {
		err = cerr
	}
	if err != nil {
		return instrResult{err: err}
	}
	closeAll()
	closeAll = func() {}
	if err := srv.shutdown(ctx, 60*time.Second); err != nil {
		return instrResult{err: err}
	}
	n, err := callgrindTotal(out)
	if err == nil && cfg.callgrindDir != "" {
		err = keepFile(out, filepath.Join(cfg.callgrindDir, fmt.Sprintf("%s-g%d.callgrind", lib.name, g)))
	}
	return instrResult{cycles: per * int64(len(lockers)), instr: n, err: err}
}

// cycles runs n acquire-release cycles on each locker, each on a name of
// its own, all at once, as the uncontended scenario does; the first error
// stops it.
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
				rctx, rcancel := context.WithTimeout(context.Background(), releaseTimeout)
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

// callgrindControl runs callgrind_control, which answers once valgrind has
// taken the command: the counting starts or stops before it returns.
func callgrindControl(ctx context.Context, control, dir string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, control, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control %s: %w: %s", strings.Join(args, " "), err, tail(string(out), 400))
	}
	return nil
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
	fmt.Fprintf(w, "%d cycles per library and G, one shared client, each goroutine on its own name; "+
		"instructions of redis-server %s under `valgrind --tool=callgrind`, counted over those cycles only.\n\n",
		cfg.instructions, redisVersion(cfg))
	fmt.Fprintln(w, "| G | library | instructions/cycle | vs raw |")
	fmt.Fprintln(w, "|---:|:---|---:|---:|")
	for _, g := range cfg.gs {
		raw, hasRaw := results[g]["raw"]
		for _, lib := range libs {
			r := results[g][lib.name]
			if r.err != nil || r.cycles == 0 {
				fmt.Fprintf(w, "| %d | %s | failed | |\n", g, lib.name)
				continue
			}
			per := float64(r.instr) / float64(r.cycles)
			ratio := ""
			if hasRaw && raw.err == nil && raw.instr > 0 {
				ratio = fmt.Sprintf("%.2f×", per/(float64(raw.instr)/float64(raw.cycles)))
			}
			fmt.Fprintf(w, "| %d | %s | %.0f | %s |\n", g, lib.name, per, ratio)
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
