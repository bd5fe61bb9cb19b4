package dlock_test

// Regression test for two ways a lock had two holders at once when processes
// were paused:
//   - a waiter stopped (SIGSTOP) after the lock was handed to it, for longer
//     than the TTL, took the stale hand-off on resuming and dated its lease
//     from a later attempt that had found the lock busy, while another client
//     held it;
//   - a Refresh with another TTL racing the background renewal left the
//     client believing in a longer lease than Redis had.
//
// Worker processes contend for one lock; the test stops and resumes waiters
// and holders with real signals, and checks afterwards the history that the
// workers recorded on a clock they all share.

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/torture"
)

// pauseTTL is the workers' lease: short, so that a pause outlasts it, and no
// shorter, because a 2-core machine running the race detector has tens of
// milliseconds of scheduling jitter.
const pauseTTL = 400 * time.Millisecond

// The faults, by whom they stop.
const (
	// The first waiter in line, just before the holder's release hands it
	// the lock, for longer than the TTL: bug 1.
	stopWaiter = "waiter"
	// The holder, for longer than its lease: an overrun, which the lock's
	// context reports and fencing stops. Often the refreshing worker, whose
	// holds are the longest.
	stopHolder = "holder"
)

func TestPausedWaitersAndHoldersNeverDoubleHold(t *testing.T) {
	// At least 20 stopped waiters per run: in runs that stopped a waiter
	// a few times, the stale hand-off showed in about half.
	faults := []string{stopWaiter, stopHolder}
	plan := map[string]int{stopWaiter: 20, stopHolder: 6}
	done := map[string]int{}
	left := func() (n int) {
		for _, f := range faults {
			n += plan[f] - done[f]
		}
		return n
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	r := startPauseRun(t, "paused", []string{"plain", "plain", "plain", "plain", "refresh"})

	for budget := time.Now().Add(40 * time.Second); left() > 0 && time.Now().Before(budget); {
		// Let the line form again behind the worker resumed last.
		time.Sleep(30*time.Millisecond + rand.N(50*time.Millisecond))
		// A fault still to do, at random in proportion to what is left.
		var fault string
		for n := rng.IntN(left()); fault == ""; {
			for _, f := range faults {
				if n < plan[f]-done[f] {
					fault = f
					break
				}
				n -= plan[f] - done[f]
			}
		}
		w := r.target(fault, time.Second)
		if w < 0 {
			continue
		}
		var d time.Duration
		switch fault {
		case stopWaiter:
			// The hand-off comes up to one hold after the stop; its lease
			// must then run out and a waiter, waking at least every TTL/4,
			// take the lock before the stopped one runs again.
			d = pauseTTL + 150*time.Millisecond + rand.N(150*time.Millisecond)
		case stopHolder:
			d = pauseTTL + 100*time.Millisecond + rand.N(100*time.Millisecond)
		}
		r.pause(w, d)
		done[fault]++
	}
	r.finish()

	v := checkPauseHistory(r.holds, r.stops, r.t0)
	t.Logf("seed %d: stopped %d waiters, %d holders; %d critical sections: %d believed valid throughout, %d overruns (fenced writes refused %d, accepted %d), %d alive after their own stop (not judged); %d Acquire errors",
		seed, done[stopWaiter], done[stopHolder], len(r.holds), v.believed, v.overruns, v.staleRefused, v.staleAccepted, v.pausedAlive, len(r.errs))
	for _, e := range r.errs[:min(len(r.errs), 2)] {
		t.Logf("worker error: %s", e)
	}
	if left() > 0 {
		t.Fatalf("stopped only %v of %v within the time budget: the run proves little", done, plan)
	}
	if len(r.holds) < 60 {
		t.Fatalf("only %d critical sections: the run proves little", len(r.holds))
	}
	t.Logf("violations: %d double holders, %d believed-valid writes refused by the fence, %d believed-valid leases gone in Redis",
		v.doubles, v.fenceRefused, v.goneInRedis)
	for _, s := range v.violations[:min(len(v.violations), 5)] {
		t.Error(s)
	}
	if n := len(v.violations); n > 0 {
		t.Fatalf("%d violations of mutual exclusion", n)
	}
}

// A checker that cannot fail proves nothing: fed a broken history, and a real
// run with a worker that ignores the lock, it must report violations.
func TestPauseCheckerBites(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	h := func(w int, fence, from, to int64) pauseHold {
		return pauseHold{worker: w, fence: fence, enter: ms(from), exit: ms(to), checked: ms(to) + 1, alive: true, redis: "held", write: "ok"}
	}
	cases := []struct {
		name  string
		holds []pauseHold
		stops []pauseStop
		want  int
	}{
		{"sequential", []pauseHold{h(1, 1, 0, 10), h(2, 2, 11, 20)}, nil, 0},
		{"overlap", []pauseHold{h(1, 1, 0, 10), h(2, 2, 5, 20)}, nil, 1},
		{"overlap of an overrun", []pauseHold{h(1, 1, 0, 10), func() pauseHold { x := h(2, 2, 5, 20); x.alive = false; return x }()}, nil, 0},
		{"overlap of a holder stopped inside", []pauseHold{h(1, 1, 0, 10), h(2, 2, 5, 20)}, []pauseStop{{worker: 2, from: ms(6), to: ms(8)}}, 0},
		{"overlap after a stop of a waiter", []pauseHold{h(1, 1, 0, 10), h(2, 2, 5, 20)}, []pauseStop{{worker: 2, from: ms(1), to: ms(4)}}, 1},
		{"refused write", []pauseHold{func() pauseHold { x := h(1, 1, 0, 10); x.write = "stale"; return x }()}, nil, 1},
		{"gone in Redis", []pauseHold{func() pauseHold { x := h(1, 1, 0, 10); x.redis = "gone"; return x }()}, nil, 1},
	}
	for _, c := range cases {
		if got := checkPauseHistory(c.holds, c.stops, 0); len(got.violations) != c.want {
			t.Errorf("%s: %d violations %q, want %d", c.name, len(got.violations), got.violations, c.want)
		}
	}

	// The whole path (processes, the shared clock, the records) bites too.
	r := startPauseRun(t, "rogue", []string{"plain", "plain", "rogue"})
	time.Sleep(1500 * time.Millisecond)
	r.finish()
	v := checkPauseHistory(r.holds, r.stops, r.t0)
	t.Logf("with a worker that ignores the lock: %d acquisitions, %d double holders, %d refused writes", len(r.holds), v.doubles, v.fenceRefused)
	if v.doubles == 0 {
		t.Fatal("no double holder found with a worker that ignores the lock: the checker cannot fail")
	}
}

// pauseHold is one critical section of a worker.
type pauseHold struct {
	worker int
	fence  int64
	// enter after Acquire returned, exit before Release; checked after
	// the lock's context was read, which came after exit. CLOCK_MONOTONIC.
	enter, exit, checked int64
	// alive: the lock's context had not ended when read after exit, so the
	// client believed its lease valid over the whole of [enter, exit].
	alive bool
	redis string // what Redis said of the lock before the write: held, gone, err, or - (not asked)
	write string // the fenced write at the end: ok, stale (a larger fence had written), err
}

// pauseStop is one SIGSTOP of a worker, until its SIGCONT.
type pauseStop struct {
	worker   int
	from, to int64 // both stamped before the signal (SIGSTOP, SIGCONT) was sent
}

type pauseVerdict struct {
	believed, overruns, pausedAlive int
	staleRefused, staleAccepted     int // fenced writes of the overruns
	doubles, fenceRefused           int
	goneInRedis                     int
	violations                      []string
}

// checkPauseHistory judges the holds whose client believed its lease valid
// throughout (context alive when read after exit):
//   - two of them that overlap in time are two holders at once;
//   - one whose fenced write was refused was preceded by a write of a later
//     acquisition while it still believed it held the lock;
//   - one that Redis said was not ours any more was believed longer than
//     Redis had it (the lease deadline is meant to come before the expiry).
//
// Holds whose context ended are overruns, by design when a holder was stopped
// past its lease: fencing is what protects from them. Holds whose worker was
// stopped during them are not judged either: after SIGCONT the worker may
// read its context before the lock's deadline timer, overdue, has run, so
// "alive" then tells nothing about what the client knew.
func checkPauseHistory(holds []pauseHold, stops []pauseStop, t0 int64) pauseVerdict {
	var v pauseVerdict
	rel := func(ns int64) float64 { return float64(ns-t0) / 1e6 }
	stopped := func(h pauseHold) bool {
		for _, s := range stops {
			if s.worker == h.worker && s.from < h.checked && s.to > h.enter {
				return true
			}
		}
		return false
	}
	// who names a hold, and tells how soon after its worker's last SIGCONT
	// it began: a waiter taking a stale hand-off enters right after one.
	who := func(h pauseHold) string {
		s := fmt.Sprintf("w%d fence %d [%.1f, %.1f] ms", h.worker, h.fence, rel(h.enter), rel(h.exit))
		var last int64
		for _, p := range stops {
			if p.worker == h.worker && p.to <= h.enter {
				last = max(last, p.to)
			}
		}
		if last > 0 && h.enter-last < int64(time.Second) {
			s += fmt.Sprintf(" (entered %.1f ms after its SIGCONT)", float64(h.enter-last)/1e6)
		}
		return s
	}
	var believed []pauseHold
	var single []string // violations of one hold, listed after the pairs
	for _, h := range holds {
		switch {
		case !h.alive:
			v.overruns++
			switch h.write {
			case "stale":
				v.staleRefused++
			case "ok":
				v.staleAccepted++
			}
		case stopped(h):
			v.pausedAlive++
		default:
			believed = append(believed, h)
			if h.write == "stale" {
				v.fenceRefused++
				single = append(single, who(h)+": write refused by a larger fence while the lease was believed valid")
			}
			if h.redis == "gone" {
				v.goneInRedis++
				single = append(single, who(h)+": Redis said the lock was not ours while the lease was believed valid")
			}
		}
	}
	v.believed = len(believed)
	slices.SortFunc(believed, func(a, b pauseHold) int { return cmp.Compare(a.enter, b.enter) })
	for i, a := range believed {
		// Sorted by enter: every later hold that enters before a exits
		// overlaps a.
		for _, b := range believed[i+1:] {
			if b.enter >= a.exit {
				break
			}
			v.doubles++
			v.violations = append(v.violations, "two holders, both believing their lease valid: "+who(a)+" and "+who(b))
		}
	}
	v.violations = append(v.violations, single...)
	return v
}

// pauseRun is a set of worker processes contending for one lock, and what
// they recorded.
type pauseRun struct {
	t        *testing.T
	rdb      *redis.Client // of the lock's server, to find whom to stop
	lockKey  string
	queueKey string
	kinds    []string
	t0       int64
	procs    []*exec.Cmd
	stdins   []io.WriteCloser
	readers  sync.WaitGroup
	stops    []pauseStop

	mu    sync.Mutex
	holds []pauseHold
	errs  []string
}

// startPauseRun starts one worker per kind: "plain" and "refresh" use the
// lock, "rogue" ignores it. The fenced resource lives in a second
// redis-server that is never stopped.
func startPauseRun(t *testing.T, name string, kinds []string) *pauseRun {
	t.Helper()
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	r := &pauseRun{t: t, rdb: lockSrv.Client(t), lockKey: "dlock:{" + name + "}", queueKey: "dlock:{" + name + "}:q", kinds: kinds, t0: torture.Now()}
	for i, kind := range kinds {
		cmd, stdin, out := startWorker(t, "pause", "REDIS_ADDR="+lockSrv.Addr, "FENCE_ADDR="+resSrv.Addr,
			"LOCK="+name, "TTL="+pauseTTL.String(), "WORKER="+strconv.Itoa(i), "KIND="+kind)
		r.procs, r.stdins = append(r.procs, cmd), append(r.stdins, stdin)
		r.readers.Add(1)
		go r.read(i, out)
	}
	t.Cleanup(func() {
		for _, cmd := range r.procs {
			_ = redistest.ResumeProcess(cmd.Process)
			_ = cmd.Process.Kill()
		}
		r.readers.Wait()
		for _, cmd := range r.procs {
			_ = cmd.Wait()
		}
	})
	return r
}

// read collects one worker's records until it exits.
func (r *pauseRun) read(w int, out io.Reader) {
	defer r.readers.Done()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		var h pauseHold
		_, err := fmt.Sscanf(line, "hold %d %d %d %d %t %s %s", &h.fence, &h.enter, &h.exit, &h.checked, &h.alive, &h.redis, &h.write)
		r.mu.Lock()
		if err == nil {
			h.worker = w
			r.holds = append(r.holds, h)
		} else {
			r.errs = append(r.errs, fmt.Sprintf("w%d: %s", w, line))
		}
		r.mu.Unlock()
	}
}

// target finds the worker to stop for fault, watching the lock in Redis; it
// gives -1 after limit.
func (r *pauseRun) target(fault string, limit time.Duration) int {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		pipe := r.rdb.Pipeline()
		owner := pipe.HGet(bg, r.lockKey, "owner")
		head := pipe.ZRange(bg, r.queueKey, 0, 0)
		_, _ = pipe.Exec(bg)
		o := r.worker(owner.Val())
		switch {
		case o < 0:
		case fault == stopHolder:
			return o
		case r.kinds[o] == "plain" && len(head.Val()) == 1:
			// The first waiter, while a holder with short holds has the
			// lock: its release hands the lock over within the life of the
			// stopped waiter's entry. The queue holds waiters' tokens; each
			// one's data is "id|ttl|alive|owner" in the :qd hash.
			e := r.rdb.HGet(bg, r.queueKey+"d", head.Val()[0]).Val()
			if w := r.worker(e[strings.LastIndexByte(e, '|')+1:]); w >= 0 && w != o {
				return w
			}
		}
	}
	return -1
}

// worker maps an owner "w3" to the index of a worker that uses the lock.
func (r *pauseRun) worker(owner string) int {
	w, err := strconv.Atoi(strings.TrimPrefix(owner, "w"))
	if err != nil || !strings.HasPrefix(owner, "w") || w < 0 || w >= len(r.kinds) || r.kinds[w] == "rogue" {
		return -1
	}
	return w
}

// pause stops worker w for d with real signals and records when.
func (r *pauseRun) pause(w int, d time.Duration) {
	p := r.procs[w].Process
	from := torture.Now()
	if err := redistest.PauseProcess(p); err != nil {
		r.t.Fatal(err)
	}
	time.Sleep(d)
	// Stamped before SIGCONT is sent: the worker takes no stamp before the
	// signal arrives, and one stamped after the send would let a worker
	// quick to run again enter a critical section inside the window.
	to := torture.Now()
	err := redistest.ResumeProcess(p)
	r.stops = append(r.stops, pauseStop{worker: w, from: from, to: to})
	if err != nil {
		r.t.Fatal(err)
	}
}

// finish tells the workers to stop (EOF on stdin), and kills those that do
// not exit within a few seconds.
func (r *pauseRun) finish() {
	for _, in := range r.stdins {
		_ = in.Close()
	}
	done := make(chan struct{})
	go func() { r.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		r.t.Error("workers did not stop within 10s of being told")
		for _, cmd := range r.procs {
			_ = cmd.Process.Kill()
		}
		<-done
	}
	for i, cmd := range r.procs {
		if err := cmd.Wait(); err != nil {
			r.t.Errorf("worker %d: %v", i, err)
		}
	}
	r.procs = nil
}

// fencedWrite is the protected resource: it accepts a write only with a fence
// at least the largest it has accepted.
var fencedWrite = redis.NewScript(`
local max = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < max then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1`)

// pauseWorker is the body of a worker process: acquire, work a little, ask
// Redis whether the lock is still ours, write to the fenced resource, record,
// release; until stdin ends.
func pauseWorker(rdb *redis.Client) int {
	name, kind := os.Getenv("LOCK"), os.Getenv("KIND")
	ttl, err := time.ParseDuration(os.Getenv("TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	res := redis.NewClient(&redis.Options{Addr: os.Getenv("FENCE_ADDR")})
	defer res.Close()
	if kind == "refresh" {
		// Refresh takes its send time, then its command waits a moment
		// before it goes out (a pool wait, a preemption, a GC pause): a
		// renewal sent in that moment reaches Redis first.
		rdb.AddHook(&hook{before: func(cmd redis.Cmder) error {
			if isScript(cmd, scripts.Refresh) {
				time.Sleep(refreshDelay)
			}
			return nil
		}})
	}
	c := dlock.MustNew(rdb, dlock.WithDefaultOwner("w"+os.Getenv("WORKER")))
	defer c.Close(bg)
	// The test closes stdin to stop the worker, and so does a test binary
	// that dies; the timeout bounds the worker whatever happens.
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()

	write := func(fence int64) string {
		ok, err := fencedWrite.Run(bg, res, []string{"resource"}, fence).Int()
		switch {
		case err != nil:
			return "err"
		case ok == 1:
			return "ok"
		}
		return "stale"
	}
	for ctx.Err() == nil {
		if kind == "rogue" {
			// Takes no lock, yet believes it holds one.
			time.Sleep(rand.N(40 * time.Millisecond))
			enter := torture.Now()
			time.Sleep(20*time.Millisecond + rand.N(60*time.Millisecond))
			w := write(0)
			exit := torture.Now()
			fmt.Printf("hold 0 %d %d %d true - %s\n", enter, exit, torture.Now(), w)
			continue
		}
		l, err := c.Acquire(ctx, name, dlock.WithTTL(ttl), dlock.WithWait(3*time.Second))
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, dlock.ErrNotObtained) {
				fmt.Println("error", err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		// record stamps the end of a critical section begun at enter and
		// prints it. The context is read after the exit stamp: alive then
		// means alive over the whole section, a context never coming back
		// once ended.
		record := func(enter int64, seen, w string) string {
			exit := torture.Now()
			alive := l.Context().Err() == nil
			return fmt.Sprintf("hold %d %d %d %d %t %s %s", l.Fence(), enter, exit, torture.Now(), alive, seen, w)
		}
		enter := torture.Now()
		if kind == "refresh" {
			var first string
			enter, first = raceRefresh(ctx, l, ttl, func(enter int64) string { return record(enter, "-", "-") })
			if first != "" {
				fmt.Println(first)
			}
		} else {
			time.Sleep(20*time.Millisecond + rand.N(60*time.Millisecond))
		}
		seen := "held"
		tctx, tcancel := context.WithTimeout(bg, 2*time.Second)
		if _, err := l.TTL(tctx); errors.Is(err, dlock.ErrNotHeld) {
			seen = "gone"
		} else if err != nil {
			seen = "err"
		}
		tcancel()
		line := record(enter, seen, write(l.Fence()))
		_ = l.Release(bg)
		fmt.Println(line)
	}
	return 0
}

// refreshDelay holds the refreshing worker's Refresh commands back. Without
// it the short Refresh overtook the renewal in a few percent of the holds.
const refreshDelay = time.Millisecond

// raceRefresh is the hold of the refreshing worker. It refreshes to a long
// TTL, then to a short one just as the background renewal of the long lease
// falls due, so that the two race; a stop of the worker in between makes
// both fall due at once on SIGCONT. Had the renewal's long TTL won in the
// client while Redis kept the short one, the hold goes on past the short
// lease believing it valid: Redis then says the lock is gone, and a waiter
// takes it.
//
// The time up to the short Refresh is a critical section of its own, ended
// by first (which returns its record, printed later: printing before the
// short Refresh would let the renewal go first). raceRefresh returns when
// the second section began, and the first's record: a stop of the worker
// before the short Refresh then leaves the second section, where the bug
// shows, to be judged.
func raceRefresh(ctx context.Context, l dlock.Lock, ttl time.Duration, first func(enter int64) string) (int64, string) {
	long, short := 2*ttl, ttl*3/8
	enter := torture.Now()
	sent := time.Now()
	if l.Refresh(ctx, long) != nil {
		return enter, ""
	}
	// The renewal is due a third of the lease after the Refresh was sent
	// (a little after sent, taken before the call). The short Refresh is
	// stamped up to refreshDelay before that, and held back as long: a
	// renewal sent meanwhile reaches Redis first.
	time.Sleep(time.Until(sent.Add(long/3 - refreshDelay + rand.N(refreshDelay+200*time.Microsecond))))
	rec := first(enter)
	if l.Refresh(ctx, short) != nil {
		return torture.Now(), rec
	}
	enter = torture.Now()
	time.Sleep(short + ttl/10)
	return enter, rec
}
