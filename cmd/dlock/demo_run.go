package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
)

// demoRunLimit bounds one run; a healthy run takes a few seconds.
const demoRunLimit = 60 * time.Second

// modeResult is one run's outcome: what the workers counted, summed, and
// what the shop holds at the end.
type modeResult struct {
	workerResult
	tally
	elapsed time.Duration
}

// runMode runs the workers of one mode to the end and tallies the shop.
func (d *demo) runMode(ctx context.Context, mode string) (modeResult, error) {
	var res modeResult
	if err := d.shop.reset(ctx, d.o.stock); err != nil {
		return res, err
	}
	if err := d.rdb.Del(ctx, d.prefix+"naive:lock", d.prefix+"naive:holder").Err(); err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, demoRunLimit)
	defer cancel()
	start := time.Now()
	var (
		wg      sync.WaitGroup
		frozen  atomic.Int64
		results = make([]workerResult, d.o.workers)
		errs    = make([]error, d.o.workers)
	)
	for i := range d.o.workers {
		// CommandContext kills a worker when the run's time is up or the
		// user pressed Ctrl-C; its death signal, when the demo dies.
		cmd := exec.CommandContext(ctx, d.self, d.workerArgs(mode, i)...)
		cmd.Env, cmd.Stderr = d.env, d.a.stderr
		cmd.SysProcAttr = childAttr(syscall.SIGKILL, 0)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return res, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return res, err
		}
		if err := cmd.Start(); err != nil {
			cancel()
			wg.Wait()
			return res, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = d.tend(ctx, mode, i, cmd, stdin, stdout, &frozen)
		}()
	}
	done := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		d.progress(ctx, mode, start, &frozen, done)
	}()
	wg.Wait()
	close(done)
	<-progressDone
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.elapsed = time.Since(start)
	for _, r := range results {
		res.Requests += r.Requests
		res.Sold += r.Sold
		res.SoldOut += r.SoldOut
		res.AlreadyOrdered += r.AlreadyOrdered
		res.GaveUp += r.GaveUp
		res.Frozen += r.Frozen
		res.ForeignDeletes += r.ForeignDeletes
		res.ReleaseRefused += r.ReleaseRefused
		res.FenceRejected += r.FenceRejected
	}
	var err error
	res.tally, err = d.shop.tally(ctx)
	return res, err
}

func (d *demo) workerArgs(mode string, i int) []string {
	args := append([]string{"demo-worker"}, d.connArgs...)
	return append(args,
		"--mode", mode, "--id", strconv.Itoa(i+1), "--keys", d.prefix,
		"--users", strconv.Itoa(d.o.users), "--ttl", d.o.ttl.String(),
		// Two freezes per worker, staggered, early enough that stock is
		// left: a freeze after the sell-out harms nobody.
		"--pause-at", fmt.Sprintf("%d,%d", 2+i%3, 6+i%3))
}

// tend reads one worker's lines until it exits: it freezes the worker when
// asked and collects its result.
func (d *demo) tend(ctx context.Context, mode string, i int, cmd *exec.Cmd, stdin io.WriteCloser, stdout io.Reader, frozen *atomic.Int64) (workerResult, error) {
	var (
		res workerResult
		got bool
	)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() { // ends when the worker exits and its stdout closes
		line := sc.Text()
		switch {
		case line == linePause:
			n := frozen.Add(1)
			d.printf("%s: worker %d frozen for %v while it holds the lock (TTL %v) [freeze %d]\n", mode, i+1, d.o.pause, d.o.ttl, n)
			_ = pauseProcess(cmd.Process)
			t := time.NewTimer(d.o.pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			_ = resumeProcess(cmd.Process)
			_, _ = io.WriteString(stdin, "go\n")
		case strings.HasPrefix(line, lineResult):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, lineResult)), &res); err != nil {
				return res, fmt.Errorf("worker %d: bad result %q: %w", i+1, line, err)
			}
			got = true
		default:
			d.printf("%s: worker %d: %s\n", mode, i+1, line)
		}
	}
	_ = stdin.Close()
	err := cmd.Wait()
	if err == nil && !got {
		err = fmt.Errorf("worker %d exited without a result", i+1)
	}
	if err != nil {
		return res, fmt.Errorf("worker %d: %w", i+1, err)
	}
	return res, nil
}

// progress prints the shop's state every second until done is closed.
func (d *demo) progress(ctx context.Context, mode string, start time.Time, frozen *atomic.Int64, done <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
			t, err := d.shop.tally(ctx)
			if err != nil {
				continue
			}
			d.printf("%s: %4.1fs: %d orders, stock shows %d, %d freezes so far\n",
				mode, time.Since(start).Seconds(), t.Orders, t.Stock, frozen.Load())
		}
	}
}

// oversold is how many orders the shop took beyond its stock.
func (r modeResult) oversold(stock int) int64 { return max(0, r.Orders-int64(stock)) }

func (r modeResult) broken(stock int) bool { return r.oversold(stock) > 0 || r.Duplicates > 0 }

// report prints the comparison table and what it means, and fails the demo
// when the dlock run broke the shop's rules: that would be a bug.
func (d *demo) report(naive, dl modeResult) error {
	stock := d.o.stock
	d.mu.Lock()
	tw := tabwriter.NewWriter(d.a.stdout, 0, 4, 3, ' ', 0)
	row := func(label, n, l string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", label, n, l) }
	num := func(v int64) string { return fmt.Sprint(v) }
	dup := func(r modeResult) string {
		if r.Duplicates == 0 {
			return "0"
		}
		return fmt.Sprintf("%d (%d users)", r.Duplicates, r.DupUsers)
	}
	row("", "naive lock", "dlock")
	row("requests (users x workers)", num(int64(naive.Requests)), num(int64(dl.Requests)))
	row(fmt.Sprintf("orders taken (stock %d)", stock), num(naive.Orders), num(dl.Orders))
	row("oversold", num(naive.oversold(stock)), num(dl.oversold(stock)))
	row("duplicate orders", dup(naive), dup(dl))
	row("stock the shop shows at the end", num(naive.Stock), num(dl.Stock))
	row("holders frozen past their TTL", num(int64(naive.Frozen)), num(int64(dl.Frozen)))
	row("locks deleted by a non-owner", fmt.Sprintf("%d (at least)", naive.ForeignDeletes), "0")
	row("releases refused: not the owner", "n/a (DEL never refuses)", num(int64(dl.ReleaseRefused)))
	row("stale writes rejected by fencing", "n/a (no fencing)", num(int64(dl.FenceRejected)))
	row("gave up waiting for the lock", num(int64(naive.GaveUp)), num(int64(dl.GaveUp)))
	row("time", roundDur(naive.elapsed).String(), roundDur(dl.elapsed).String())
	_ = tw.Flush()
	d.mu.Unlock()
	d.printf("\n")

	if naive.broken(stock) {
		d.printf("The naive lock broke: %d oversold, %d duplicate orders. A frozen holder's lock expired\n"+
			"under it; others took the lock and sold meanwhile; the frozen holder then wrote a stock\n"+
			"count computed before the freeze, and its DEL removed the next holder's lock.\n",
			naive.oversold(stock), naive.Duplicates)
	} else {
		d.printf("The naive lock happened to show no overselling and no duplicates in this run: the race\n" +
			"depends on timing. Its flaws are still there; run the demo again to see them.\n")
	}
	if naive.Frozen == 0 || dl.Frozen == 0 {
		d.printf("(No holder was frozen in one of the runs: not enough sales per worker for the freeze schedule.)\n")
	}
	d.printf("Not shown: a naive holder that crashes between SETNX and PEXPIRE leaves a lock that never expires.\n")
	if dl.broken(stock) {
		d.printf("dlock BROKE the shop's rules: %d oversold, %d duplicate orders. This is a bug; please report it.\n",
			dl.oversold(stock), dl.Duplicates)
		return &exitError{code: exitConflict, err: errors.New("demo: the dlock run oversold or duplicated orders")}
	}
	d.printf("dlock: no overselling, no duplicate orders. Frozen holders lost their leases too (nothing\n"+
		"renews a frozen process), but the shop refused their %d stale writes by fencing token,\n"+
		"and their %d releases could not delete the next holder's lock.\n", dl.FenceRejected, dl.ReleaseRefused)
	return nil
}
