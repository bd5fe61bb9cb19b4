package torture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/internal/scripts"
)

// InProcessOptions shapes RunInProcess. The zero value is a sensible run.
type InProcessOptions struct {
	Workers int           // dlock Clients, each on a go-redis client of its own (default 5)
	Names   int           // lock names they contend for (default 2)
	TTL     time.Duration // lease of every acquisition (default 400ms)
	Wait    time.Duration // WithWait of every Acquire (default 2×TTL)

	// Rates of each kind of fault; the zero value means DefaultFaultRates.
	Rates FaultRates
	// NoFaults turns fault injection off.
	NoFaults bool

	// Naive replaces dlock by a deliberately broken lock: SET NX PX, a fence
	// from INCR, a bare DEL, no renewal. Check must find violations.
	Naive bool

	// PerClient is how many goroutines loop on each Client (default 1):
	// above one, a Client's waiters of a name meet (writers in its local
	// line, readers each in Redis). Their worker numbers are the Client's
	// index plus k*Workers.
	PerClient int

	// Shared is the share of acquisitions that are read locks
	// (dlock.WithShared): they hold the name beside other reads, and, having no
	// write to make, do not touch the resource. Zero: writes only.
	Shared float64
	// WritesShared breaks the read-write lock on purpose: writes take a
	// read lock too (and are recorded as writes). Check must find writers
	// overlapping.
	WritesShared bool

	// Sets: every acquisition takes 2–3 of the names at once with
	// dlock.AcquireAll, given in a random order, and each name is recorded
	// as a hold of its own. Give Names ≥ 3 so that sets overlap partly.
	Sets bool
	// SetsSkipOne breaks the sets on purpose: the last name given is
	// recorded as held but never taken. Check must find two holders.
	SetsSkipOne bool
	// SetsGivenOrder takes each set name by name in the order given, not
	// in AcquireAll's canonical order: sets deadlock until their waits run
	// out.
	SetsGivenOrder bool

	// MinHold: every acquisition asks for dlock.WithMinHold(MinHold), and
	// the history says so for Check.
	MinHold time.Duration
	// MinHoldUnasked breaks it on purpose: the history says MinHold, the
	// acquisitions do not ask for it. Check must find holders let in early.
	MinHoldUnasked bool

	// Prefix is put before every key, in both Redis servers (default
	// "torture:<seed>:<time>:"). It must not contain '{' or '}'.
	Prefix string
}

// FaultRates are the probabilities of each fault: per lock command (a dlock
// script, or a pipeline of them) for the first four, of which at most one
// hits a command; per read of a pub/sub connection for PubSub.
type FaultRates struct {
	Delay, Duplicate, Drop, Reorder float64
	PubSub                          float64
}

// DefaultFaultRates hits about one lock command in five, and delays one
// pub/sub read in five.
func DefaultFaultRates() FaultRates {
	return FaultRates{Delay: 0.06, Duplicate: 0.05, Drop: 0.04, Reorder: 0.05, PubSub: 0.2}
}

// errInjected is what a dropped command or reply returns: a network error,
// whose outcome the caller cannot know.
var errInjected = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("torture: injected fault")}

// RunInProcess runs opts.Workers dlock Clients on the Redis at addr for about
// d, all in this process, each on its own go-redis client whose lock commands
// and pub/sub reads are faulted by hooks driven by seed. Every goroutine
// loops: Acquire one of opts.Names names, read the protected resource (a
// Redis at resAddr that no fault touches) with the lock's fence, work 0–3 ms
// (now and then longer than the TTL), write back with the fence, Release. It
// returns what happened for Check.
//
// A run with the same seed makes the same choices (names, work, which fault
// hits the n-th lock command of each client and how): not the same timing,
// but close enough to debug a finding. Every wait is bounded: the run
// returns within d plus the wait, the longest work and two release timeouts.
// It prints nothing.
func RunInProcess(ctx context.Context, addr, resAddr string, seed uint64, d time.Duration, opts InProcessOptions) (History, error) {
	opts = opts.withDefaults(seed)
	if strings.ContainsAny(opts.Prefix, "{}") {
		return History{}, fmt.Errorf("torture: prefix %q must not contain '{' or '}'", opts.Prefix)
	}
	resRDB := redis.NewClient(&redis.Options{Addr: resAddr, ContextTimeoutEnabled: true})
	defer resRDB.Close()
	if err := resRDB.Ping(ctx).Err(); err != nil {
		return History{}, fmt.Errorf("torture: the resource's Redis at %s: %w", resAddr, err)
	}
	r := &inproc{
		opts: opts, seed: seed, rec: &histRecorder{}, ot: &overtakes{held: map[*heldCmd]struct{}{}},
		res: NewResource(resRDB, opts.Prefix+"res:"),
	}
	for i := range opts.Names {
		r.names = append(r.names, fmt.Sprintf("n%d", i))
	}

	// One go-redis client and one injector per worker.
	rates := opts.Rates
	if opts.NoFaults {
		rates = FaultRates{}
	}
	lockPrefix := opts.Prefix + "lock:" // the dlock clients'
	injectors := make([]*injector, opts.Workers)
	rdbs := make([]*redis.Client, opts.Workers)
	for i := range rdbs {
		in := &injector{worker: i, prefix: lockPrefix, ttl: opts.TTL, rates: rates, rec: r.rec, ot: r.ot,
			rng:    rand.New(rand.NewPCG(seed, uint64(i)<<8|1)),
			subRNG: rand.New(rand.NewPCG(seed, uint64(i)<<8|2))}
		injectors[i] = in
		o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
		if rates.PubSub > 0 {
			o.Dialer = in.dial
		}
		rdbs[i] = redis.NewClient(o)
		rdbs[i].AddHook(in)
	}
	defer func() {
		for i, rdb := range rdbs {
			injectors[i].late.Wait() // late deliveries use the client
			_ = rdb.Close()
		}
	}()
	if err := rdbs[0].Ping(ctx).Err(); err != nil {
		return History{}, fmt.Errorf("torture: the lock's Redis at %s: %w", addr, err)
	}

	h := History{TTL: opts.TTL, MinHold: opts.MinHold, Wait: opts.Wait, Start: Now()}
	stopAt := time.Now().Add(d)
	var wg sync.WaitGroup
	clients := make([]*dlock.Client, opts.Workers)
	for i := range clients {
		if !opts.Naive {
			clients[i] = dlock.MustNew(rdbs[i], dlock.WithPrefix(lockPrefix),
				dlock.WithReleaseTimeout(time.Second), dlock.WithDefaultOwner(fmt.Sprintf("torture-w%d", i)))
		}
		for g := range max(opts.PerClient, 1) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The first goroutine of each Client keeps the Client's
				// index, so a seed's choices do not change with PerClient.
				r.worker(ctx, i+g*opts.Workers, clients[i], rdbs[i], stopAt)
			}()
		}
	}
	wg.Wait()
	h.Stop = Now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, c := range clients {
		if c != nil {
			_ = c.Close(cctx)
		}
	}
	for _, in := range injectors {
		in.late.Wait()
	}

	var err error
	h.Accesses, err = r.res.Accesses(cctx)
	// The resource's keys go; the lock's expire by themselves.
	for _, n := range r.names {
		_ = resRDB.Del(cctx, r.res.keys(n)...).Err()
	}
	r.rec.mu.Lock()
	h.Holds, h.Attempts, h.Faults = r.rec.holds, r.rec.attempts, r.rec.faults
	r.rec.mu.Unlock()
	return h, err
}

func (o InProcessOptions) withDefaults(seed uint64) InProcessOptions {
	if o.Workers <= 0 {
		o.Workers = 5
	}
	if o.Names <= 0 {
		o.Names = 2
	}
	if o.TTL <= 0 {
		o.TTL = 400 * time.Millisecond
	}
	if o.Wait <= 0 {
		o.Wait = 2 * o.TTL
	}
	if o.Rates == (FaultRates{}) {
		o.Rates = DefaultFaultRates()
	}
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("torture:%d:%d:%d:", seed, os.Getpid(), Now())
	}
	return o
}

// inproc is one run.
type inproc struct {
	opts  InProcessOptions
	seed  uint64
	names []string
	rec   *histRecorder
	ot    *overtakes
	res   *Resource
}

// histRecorder collects what the goroutines of a run saw.
type histRecorder struct {
	mu       sync.Mutex
	holds    []Hold
	attempts []Attempt
	faults   []Fault
}

func (r *histRecorder) hold(h Hold) {
	r.mu.Lock()
	r.holds = append(r.holds, h)
	r.mu.Unlock()
}

func (r *histRecorder) attempt(a Attempt) {
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
}

func (r *histRecorder) fault(f Fault) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
}

// worker is one client's loop. c is nil for the naive lock.
func (r *inproc) worker(ctx context.Context, i int, c *dlock.Client, rdb *redis.Client, stopAt time.Time) {
	rng := rand.New(rand.NewPCG(r.seed, uint64(i)<<8|3))
	seq := 0
	for ctx.Err() == nil && time.Now().Before(stopAt) {
		if r.opts.Sets && c != nil {
			r.setStep(ctx, i, c, rng, &seq)
			continue
		}
		name := r.names[rng.IntN(len(r.names))]
		work := r.work(rng)
		asked := Now()
		var l holdable
		var err error
		// Drawn only in runs with reads, so that a seed of a write-only run
		// makes the choices it always made.
		// The naive lock has no reads.
		shared := r.opts.Shared > 0 && rng.Float64() < r.opts.Shared && c != nil
		if c != nil {
			opts := []dlock.AcquireOption{dlock.WithTTL(r.opts.TTL), dlock.WithWait(r.opts.Wait)}
			if shared || r.opts.WritesShared {
				opts = append(opts, dlock.WithShared())
			}
			if r.opts.MinHold > 0 && !r.opts.MinHoldUnasked {
				opts = append(opts, dlock.WithMinHold(r.opts.MinHold))
			}
			var dl dlock.Lock
			if dl, err = c.Acquire(ctx, name, opts...); err == nil {
				l = dl
			}
		} else {
			l, err = r.naiveAcquire(ctx, rdb, i, seq, name, rng)
		}
		if err != nil {
			r.rec.attempt(Attempt{Worker: i, Name: name, Asked: asked, End: Now(), Outcome: attemptOutcome(err), Err: err.Error()})
			if !errors.Is(err, dlock.ErrNotObtained) {
				sleepCtx(ctx, 5*time.Millisecond) // an error may come back at once
			}
			continue
		}
		seq++
		r.hold(i, seq, name, shared, asked, l, work)
	}
}

// work is how long a critical section lasts: 0–3 ms, one in fifty longer
// than the TTL (renewals under faults).
func (r *inproc) work(rng *rand.Rand) time.Duration {
	if rng.IntN(50) == 0 {
		return r.opts.TTL + time.Duration(rng.Int64N(int64(r.opts.TTL/2)))
	}
	return time.Duration(rng.Int64N(int64(3 * time.Millisecond)))
}

// holdable is a lock as the loop uses it: dlock's, or the naive one.
type holdable interface {
	Fence() int64
	// Context ends when the lock is lost; nil if the lock cannot tell.
	Context() context.Context
	Release(ctx context.Context) error
}

// hold runs one critical section and records it.
func (r *inproc) hold(i, seq int, name string, shared bool, asked int64, l holdable, work time.Duration) {
	h := Hold{Worker: i, Seq: seq, Name: name, Fence: l.Fence(), Shared: shared, Asked: asked, Got: Now()}
	var (
		mu    sync.Mutex
		done  bool
		lost  int64
		fired = make(chan struct{})
		stop  = func() bool { return true }
	)
	lctx := l.Context()
	if lctx != nil {
		// Stamped on the goroutine AfterFunc starts, and only before Done:
		// a loss after the critical section ended is none.
		stop = context.AfterFunc(lctx, func() {
			defer close(fired)
			mu.Lock()
			if !done {
				lost = Now()
			}
			mu.Unlock()
		})
	}

	// The resource is never faulted, and its calls must not be cut by the
	// run's end: they run on a context of their own.
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if shared {
		// A reader's fence orders it against writers, not against the
		// other readers: the resource, which refuses any fence below the
		// largest it saw, would refuse the older of two readers. The
		// overlap check judges reads.
		time.Sleep(work)
	} else {
		v, rd := r.res.Read(rctx, i, name, h.Fence)
		h.Read = rd
		time.Sleep(work)
		if rd == "ok" {
			h.Write = r.res.Write(rctx, i, name, h.Fence, v)
		}
	}

	mu.Lock()
	done = true
	h.Done = Now()
	mu.Unlock()
	err := l.Release(rctx)
	if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		// The outcome is unknown: try once more, as a careful caller
		// does; a release that had run reports success.
		err = l.Release(rctx)
	}
	h.Release = releaseOutcome(err)
	h.Released = Now()
	if lctx != nil {
		h.Final = causeOf(context.Cause(lctx))
		if !stop() {
			<-fired
		}
		mu.Lock()
		h.Lost = lost
		mu.Unlock()
		if lost != 0 { // as the workers have it: the cause of a loss before Done
			h.Cause = causeOf(context.Cause(lctx))
		}
	}
	r.rec.hold(h)
}

// isUnknown reports whether err leaves the outcome of a command unknown: a
// network error or a timeout, as opposed to an answer of Redis.
func isUnknown(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// attemptOutcome classes the error of an Acquire: busy (not obtained),
// unknown (the command may have run), failed.
func attemptOutcome(err error) string {
	switch {
	case errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, errBusy):
		return "busy"
	case isUnknown(err):
		return "unknown"
	}
	return "failed"
}

// releaseOutcome classes the error of a Release.
func releaseOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, dlock.ErrNotHeld):
		return "not_held"
	case isUnknown(err):
		return "unknown"
	}
	return "failed"
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// naiveLock is the planted broken lock: no owner check on release, no
// renewal, no way to learn of a loss.
type naiveLock struct {
	rdb   *redis.Client
	key   string
	fence int64
}

func (l *naiveLock) Fence() int64             { return l.fence }
func (l *naiveLock) Context() context.Context { return nil }
func (l *naiveLock) Release(ctx context.Context) error {
	return l.rdb.Del(ctx, l.key).Err() // whoever holds it now
}

func (r *inproc) naiveAcquire(ctx context.Context, rdb *redis.Client, i, seq int, name string, rng *rand.Rand) (*naiveLock, error) {
	key := r.opts.Prefix + "naive:" + name
	token := fmt.Sprintf("w%d-%d", i, seq)
	until := time.Now().Add(r.opts.Wait)
	for {
		ok, err := rdb.SetNX(ctx, key, token, r.opts.TTL).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			fence, err := rdb.Incr(ctx, key+":fence").Result()
			if err != nil {
				return nil, err
			}
			return &naiveLock{rdb: rdb, key: key, fence: fence}, nil
		}
		if time.Now().After(until) || !sleepCtx(ctx, time.Duration(1+rng.IntN(5))*time.Millisecond) {
			return nil, dlock.ErrNotObtained
		}
	}
}

// injector is one client's go-redis hook and dialer: it faults the client's
// lock commands (the dlock scripts, alone or in a pipeline) and delays reads
// of its pub/sub connections, drawing every choice from RNGs seeded from the
// run's seed and the worker's index.
type injector struct {
	worker int
	prefix string // the dlock clients' key prefix, to read lock names by
	ttl    time.Duration
	rates  FaultRates
	rec    *histRecorder
	ot     *overtakes

	mu     sync.Mutex
	rng    *rand.Rand // lock commands
	subRNG *rand.Rand // pub/sub reads

	late sync.WaitGroup // commands delivered after their caller gave up
}

// plan is what happens to one lock command.
type plan struct {
	kind string
	d    time.Duration // the delay, reorder bound, or gap before a duplicate
	// flag: for a drop, the command ran and only the reply is lost; for a
	// delay, the command goes at once and its reply comes late (Redis'
	// lease starts early, the client learns of it late).
	flag bool
}

func (in *injector) plan() plan {
	in.mu.Lock()
	defer in.mu.Unlock()
	u := in.rng.Float64()
	p := plan{d: in.delay(in.rng), flag: in.rng.IntN(2) == 0}
	r := in.rates
	switch {
	case u < r.Delay:
		p.kind = FaultDelay
	case u < r.Delay+r.Duplicate:
		p.kind = FaultDuplicate
		p.d = min(p.d, 30*time.Millisecond) // go-redis re-sends after a short backoff
	case u < r.Delay+r.Duplicate+r.Drop:
		p.kind = FaultDrop
	case u < r.Delay+r.Duplicate+r.Drop+r.Reorder:
		p.kind = FaultReorder
	}
	return p
}

// delay is mostly short (1–30 ms); one in five runs to 60% of the TTL, and
// one in twenty-five to 150% of it: past the lease, past a renewal's
// deadline, past a waiter's wait.
func (in *injector) delay(rng *rand.Rand) time.Duration {
	switch n := rng.IntN(25); {
	case n == 0:
		return in.ttl*6/10 + time.Duration(rng.Int64N(int64(in.ttl*9/10)))
	case n < 5:
		return time.Millisecond + time.Duration(rng.Int64N(int64(in.ttl*6/10)))
	}
	return time.Duration(1+rng.IntN(30)) * time.Millisecond
}

func (in *injector) DialHook(next redis.DialHook) redis.DialHook { return next }

func (in *injector) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isLockCmd(cmd) {
			return next(ctx, cmd)
		}
		return in.run(ctx, []redis.Cmder{cmd}, func(ctx context.Context, cmds []redis.Cmder) error {
			err := next(ctx, cmds[0])
			if err != nil {
				cmds[0].SetErr(err)
			}
			return err
		})
	}
}

func (in *injector) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		lock := false
		for _, c := range cmds {
			lock = lock || isLockCmd(c)
		}
		if !lock {
			return next(ctx, cmds)
		}
		return in.run(ctx, cmds, func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmds) })
	}
}

// run sends cmds through send with the fault the plan draws.
func (in *injector) run(ctx context.Context, cmds []redis.Cmder, send func(context.Context, []redis.Cmder) error) error {
	p := in.plan()
	before := in.ot.snapshot() // commands held back now: this one overtakes them
	defer in.ot.passed(before)
	if p.kind == "" {
		return send(ctx, cmds)
	}
	f := Fault{Kind: p.kind, Worker: in.worker, Name: lockName(in.prefix, cmds), From: Now(), Note: describe(cmds)}
	var err error
	switch p.kind {
	case FaultDelay, FaultReorder:
		if p.kind == FaultDelay && p.flag {
			err = send(ctx, cmds)
			if !sleepCtx(ctx, p.d) {
				err = ctx.Err()
				setErr(cmds, err)
			}
			f.Note += ", reply delayed"
			break
		}
		var h *heldCmd
		if p.kind == FaultReorder {
			h = in.ot.hold()
		}
		if !in.wait(ctx, p.d, h) {
			// The caller gave up while the command was on its way: it
			// still arrives, late, as on a slow network.
			err = ctx.Err()
			setErr(cmds, err)
			in.deliverLate(f, p.d-time.Duration(Now()-f.From), h, cmds, send)
			return err
		}
		if h != nil && h.overtaken() {
			f.Note += ", overtaken"
		}
		err = send(ctx, cmds)
	case FaultDuplicate:
		_ = send(ctx, cmds)
		// The copy reaches Redis even if the caller gives up meanwhile,
		// as a re-sent command already on the wire would.
		time.Sleep(p.d)
		err = send(context.WithoutCancel(ctx), cmds) // the first reply is lost
		if ctx.Err() != nil {
			err = ctx.Err()
			setErr(cmds, err)
		}
		f.Note += fmt.Sprintf(", gap %v", p.d.Round(time.Millisecond))
	case FaultDrop:
		if p.flag {
			_ = send(ctx, cmds)
			f.Note += ", reply lost"
		} else {
			f.Note += ", request lost"
		}
		err = errInjected
		setErr(cmds, err)
	}
	f.To = Now()
	in.rec.fault(f)
	return err
}

// wait holds a command back for up to d, less if h is overtaken first. It
// reports false if ctx ended first.
func (in *injector) wait(ctx context.Context, d time.Duration, h *heldCmd) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	var overtaken <-chan struct{}
	if h != nil {
		overtaken = h.ch
	}
	select {
	case <-t.C:
	case <-overtaken:
	case <-ctx.Done():
		return false
	}
	if h != nil {
		in.ot.unhold(h)
	}
	return true
}

// deliverLate sends copies of cmds (their caller has returned with them) after
// the rest of the delay, on a context of their own.
func (in *injector) deliverLate(f Fault, rest time.Duration, h *heldCmd, cmds []redis.Cmder, send func(context.Context, []redis.Cmder) error) {
	ctx, cancel := context.WithTimeout(context.Background(), max(rest, 0)+time.Second)
	copies := make([]redis.Cmder, len(cmds))
	for i, c := range cmds {
		copies[i] = redis.NewCmd(ctx, c.Args()...)
	}
	in.late.Add(1)
	go func() {
		defer in.late.Done()
		defer cancel()
		in.wait(ctx, max(rest, 0), h)
		if h != nil {
			in.ot.unhold(h)
		}
		_ = send(ctx, copies)
		f.To = Now()
		f.Note += ", delivered after the caller gave up"
		in.rec.fault(f)
	}()
}

func setErr(cmds []redis.Cmder, err error) {
	for _, c := range cmds {
		c.SetErr(err)
	}
}

// isLockCmd: a dlock script, by SHA or by source.
func isLockCmd(cmd redis.Cmder) bool {
	n := strings.ToLower(cmd.Name())
	return n == "evalsha" || n == "eval"
}

// scriptName names the script a command runs.
func scriptName(cmd redis.Cmder) string {
	a := cmd.Args()
	if len(a) < 2 {
		return "?"
	}
	x, _ := a[1].(string)
	for _, s := range []struct {
		name string
		s    *redis.Script
	}{{"acquire", scripts.Acquire}, {"release", scripts.Release}, {"refresh", scripts.Refresh}, {"pttl", scripts.PTTL}} {
		if x == s.s.Hash() {
			return s.name
		}
	}
	if strings.ToLower(cmd.Name()) == "eval" {
		return "eval"
	}
	return "?"
}

func describe(cmds []redis.Cmder) string {
	if len(cmds) == 1 {
		return scriptName(cmds[0])
	}
	return fmt.Sprintf("pipeline of %d %s", len(cmds), scriptName(cmds[0]))
}

// lockName reads the lock's name from the first key of a lock's under
// prefix (a script's first key is a lock hash or a semaphore's permits).
func lockName(prefix string, cmds []redis.Cmder) string {
	for _, c := range cmds {
		a := c.Args()
		if len(a) < 4 {
			continue
		}
		k, _ := a[3].(string)
		if name, kind := node.ParseKey(prefix, k); kind != node.KeyNone {
			return name
		}
	}
	return ""
}

// overtakes lets a reordered command wait until a later one has gone past.
type overtakes struct {
	mu   sync.Mutex
	held map[*heldCmd]struct{}
}

type heldCmd struct {
	ch     chan struct{}
	closed bool
}

func (h *heldCmd) overtaken() bool {
	select {
	case <-h.ch:
		return true
	default:
		return false
	}
}

func (o *overtakes) hold() *heldCmd {
	h := &heldCmd{ch: make(chan struct{})}
	o.mu.Lock()
	o.held[h] = struct{}{}
	o.mu.Unlock()
	return h
}

func (o *overtakes) unhold(h *heldCmd) {
	o.mu.Lock()
	delete(o.held, h)
	o.mu.Unlock()
}

// snapshot returns the commands held back now.
func (o *overtakes) snapshot() []*heldCmd {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.held) == 0 {
		return nil
	}
	hs := make([]*heldCmd, 0, len(o.held))
	for h := range o.held {
		hs = append(hs, h)
	}
	return hs
}

// passed lets go the commands of hs: a command sent after they were held
// back has completed.
func (o *overtakes) passed(hs []*heldCmd) {
	if len(hs) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, h := range hs {
		if !h.closed {
			h.closed = true
			close(h.ch)
		}
	}
}

// dial makes the client's connections, telling pub/sub ones (they write a
// SUBSCRIBE or SSUBSCRIBE first) from command ones, and delays reads of the
// former: hand-off messages and subscription confirmations arrive late.
func (in *injector) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: c, in: in, closed: make(chan struct{})}, nil
}

type tapConn struct {
	net.Conn
	in        *injector
	pubsub    atomic.Bool
	closeOnce sync.Once
	closed    chan struct{}
}

var subscribeCmd = []byte("subscribe") // in "subscribe" and "ssubscribe"

func (c *tapConn) Write(b []byte) (int, error) {
	// A command is an array whose first element is its name: look at its
	// head only, not at a script's source or a key.
	if !c.pubsub.Load() && bytes.Contains(bytes.ToLower(b[:min(len(b), 24)]), subscribeCmd) {
		c.pubsub.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *tapConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.pubsub.Load() {
		c.in.mu.Lock()
		hit := c.in.subRNG.Float64() < c.in.rates.PubSub
		d := c.in.delay(c.in.subRNG)
		c.in.mu.Unlock()
		if hit {
			f := Fault{Kind: FaultPubSub, Worker: c.in.worker, From: Now(), Note: fmt.Sprintf("%d bytes", n)}
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-c.closed:
				t.Stop()
			}
			f.To = Now()
			c.in.rec.fault(f)
		}
	}
	return n, err
}

func (c *tapConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
