package torture

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// nemesis injects the scenario's faults one at a time, with a random gap
// between them, until the scenario's time is up. Every fault is bounded in
// time and logged with its window and target.
func (r *run) nemesis(ctx context.Context) {
	deadline := time.Now().Add(r.sc.Duration)
	if len(r.sc.Faults) == 0 {
		sleepCtx(ctx, r.sc.Duration)
		return
	}
	// The kinds in a shuffled round, again and again: every kind comes up
	// in a short run too.
	order := r.rng.Perm(len(r.sc.Faults))
	for n := 0; ctx.Err() == nil && time.Until(deadline) > 2*r.sc.TTL; n++ {
		sleepCtx(ctx, r.sc.TTL/2+time.Duration(r.rng.Int64N(int64(r.sc.TTL))))
		kind := r.sc.Faults[order[n%len(order)]]
		var err error
		switch kind {
		case FaultKill:
			err = r.kill(ctx)
		case FaultPause:
			err = r.pause(ctx)
		case FaultBlackhole:
			err = r.cut(ctx, kind)
		case FaultLatency:
			err = r.cut(ctx, kind)
		case FaultRestartAOF, FaultRestartEmpty:
			err = r.restart(ctx, kind)
		case FaultCrash, FaultCrashDurable:
			err = r.crash(ctx, kind)
		case FaultEvict:
			err = r.evict(ctx)
		case FaultFailover:
			err = r.failover(ctx)
		case FaultMigrate:
			err = r.migrate(ctx)
		case FaultNodePause, FaultNodeKill:
			err = r.nodeFault(ctx, kind)
		case FaultForceUnlock:
			err = r.forceUnlock(ctx)
		default:
			err = fmt.Errorf("torture: the nemesis cannot inject %q", kind)
		}
		if err == errNoTarget {
			// Nobody to fault just now (no holder between a kill and the
			// next grant): the same kind at the next turn, so that a short
			// run still injects every kind (a mixed run once went without
			// latency, both its turns finding no holder).
			n--
			continue
		}
		if err != nil {
			r.mu.Lock()
			r.errs = append(r.errs, err.Error())
			r.mu.Unlock()
			return
		}
	}
	sleepCtx(ctx, time.Until(deadline))
}

// pick returns a live worker holding a lock (holder true) or waiting for one,
// preferring one whose name is name; nil if none.
func (r *run) pick(holder bool, name string) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	var any, same []*proc
	for _, p := range r.procs {
		if p == nil {
			continue
		}
		n := p.waiting
		if holder {
			n = p.holding
		}
		if n == "" {
			continue
		}
		any = append(any, p)
		if n == name {
			same = append(same, p)
		}
	}
	if len(same) > 0 {
		return same[r.rng.IntN(len(same))]
	}
	if len(any) == 0 || name != "" {
		return nil
	}
	return any[r.rng.IntN(len(any))]
}

// kill kills a worker with SIGKILL and starts another in its slot: a quarter
// of the time whoever holds a lock now, half the time the next worker to get
// one, within 10 ms of getting it (a lock just granted, renewal not yet
// started), otherwise a waiter.
func (r *run) kill(ctx context.Context) error {
	var p *proc
	switch r.rng.IntN(4) {
	case 0:
		p = r.pick(true, "")
	case 1, 2:
		// Drain a stale grant, then wait for a fresh one.
		select {
		case <-r.grants:
		default:
		}
		select {
		case p = <-r.grants:
			time.Sleep(time.Duration(r.rng.Int64N(int64(10 * time.Millisecond))))
		case <-time.After(2 * r.sc.TTL):
		case <-ctx.Done():
		}
	case 3:
		p = r.pick(false, "")
	}
	if p == nil {
		return errNoTarget
	}
	r.mu.Lock()
	name, state := p.holding, "holding"
	if name == "" {
		name, state = p.waiting, "waiting for"
	}
	r.mu.Unlock()
	from := Now()
	_ = p.cmd.Process.Kill()
	<-p.exited
	to := Now()
	r.mu.Lock()
	if i, ok := r.open[p.id]; ok {
		if r.h.Holds[i].Done == 0 {
			r.h.Holds[i].Died = to
		}
		delete(r.open, p.id)
	}
	r.mu.Unlock()
	r.fault(Fault{Kind: FaultKill, Worker: p.id, Name: name, From: from, To: to, Note: fmt.Sprintf("%s %q", state, name)})
	return r.spawn(p.slot)
}

// pause stops a holder and a waiter for the same name with SIGSTOP for
// longer than the TTL, then resumes them.
func (r *run) pause(ctx context.Context) error {
	h := r.pick(true, "")
	if h == nil {
		return errNoTarget
	}
	r.mu.Lock()
	name := h.holding
	r.mu.Unlock()
	stop := []*proc{h}
	if w := r.pick(false, name); w != nil {
		stop = append(stop, w)
	}
	d := r.sc.TTL + 100*time.Millisecond + time.Duration(r.rng.Int64N(int64(200*time.Millisecond)))
	from := Now()
	for _, p := range stop {
		_ = pause(p.cmd.Process)
	}
	sleepCtx(ctx, d)
	// Stamped before SIGCONT is sent: a stamp after the send would let a
	// worker quick to run again act inside the window.
	to := Now()
	for _, p := range stop {
		_ = resume(p.cmd.Process)
	}
	for i, p := range stop {
		role := "holder"
		if i == 1 {
			role = "waiter"
		}
		r.fault(Fault{Kind: FaultPause, Worker: p.id, Name: name, From: from, To: to, Note: fmt.Sprintf("%s of %q", role, name)})
	}
	return nil
}

// cut blackholes or delays (past the read timeout) the connections of a
// holder, or of every worker, for two to three TTLs.
func (r *run) cut(ctx context.Context, kind string) error {
	h := r.pick(true, "")
	if h == nil {
		return errNoTarget
	}
	proxies, worker, note := r.proxies[h.slot:h.slot+1], h.id, "holder"
	if r.rng.IntN(3) == 0 {
		proxies, worker, note = r.proxies, -1, "every worker"
	}
	d := 2*r.sc.TTL + time.Duration(r.rng.Int64N(int64(r.sc.TTL)))
	from := Now()
	for _, p := range proxies {
		if kind == FaultBlackhole {
			p.Blackhole()
		} else {
			p.Delay(r.readTimeout() + 200*time.Millisecond)
		}
	}
	sleepCtx(ctx, d)
	for _, p := range proxies {
		p.Pass()
	}
	to := Now()
	if kind == FaultLatency {
		note += fmt.Sprintf(", %v each way", r.readTimeout()+200*time.Millisecond)
	}
	r.fault(Fault{Kind: kind, Worker: worker, From: from, To: to, Note: note})
	return nil
}

// restart kills the lock's Redis with SIGKILL and starts it again on the
// same port: with appendfsync always every acknowledged write survives;
// without persistence the locks are gone.
func (r *run) restart(ctx context.Context, kind string) error {
	if r.lockSrv == nil {
		return fmt.Errorf("torture: %s needs a Redis the run started", kind)
	}
	note := "no persistence: every lock gone"
	var down time.Duration
	if kind == FaultRestartAOF {
		// Down for longer than go-redis' own retries (about half a
		// second), shorter than a wait: the waiters in line ride it out
		// and get the lock once it is back (Check's giveUps).
		r.awaitWaiter(ctx)
		down = r.sc.TTL + time.Duration(r.rng.Int64N(int64(2*r.sc.TTL)))
	}
	from := Now()
	r.lockSrv.Kill()
	sleepCtx(ctx, down)
	// Started again even when ctx has ended: the run's end needs it.
	if err := r.lockSrv.Restart(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("torture: restart the lock's Redis: %w", err)
	}
	to := Now()
	if kind == FaultRestartAOF {
		note = fmt.Sprintf("appendfsync always, down %v", down.Round(time.Millisecond))
	}
	r.fault(Fault{Kind: kind, Worker: -1, From: from, To: to, Note: note})
	return nil
}

// crash kills the lock's Redis with SIGKILL, cuts its AOF back to what its
// last fsync covered (what a machine crash leaves on disk), and starts it
// again at once: the holders of grants the cut lost still have lease left
// when it serves again, which a restart after a long down time would not
// show (their leases would end first).
func (r *run) crash(ctx context.Context, kind string) error {
	if r.lockSrv == nil || r.fsyncLog == "" {
		return fmt.Errorf("torture: %s needs a Redis the run started with its fsync log", kind)
	}
	r.awaitWaiter(ctx)
	from := Now()
	r.lockSrv.Kill()
	cut, err := cutToFsynced(r.fsyncLog)
	if err != nil {
		return fmt.Errorf("torture: cut the AOF to its last fsync: %w", err)
	}
	if err := r.lockSrv.Restart(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("torture: restart the lock's Redis: %w", err)
	}
	r.fault(Fault{Kind: kind, Worker: -1, From: from, To: Now(), Note: fmt.Sprintf("appendfsync %s, %d AOF bytes after the last fsync lost", cmp.Or(r.sc.Fsync, "everysec"), cut)})
	return nil
}

// evict fills the lock's Redis under maxmemory with volatile-lru for about
// two TTLs: keys with an expiry, lock keys among them, are evicted. The
// contract does not hold then; docs/requirements.md says why.
func (r *run) evict(ctx context.Context) error {
	if r.lockSrv == nil {
		return fmt.Errorf("torture: %s needs a Redis the run started", FaultEvict)
	}
	c := r.lockAdmin
	used, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return err
	}
	var mem int64
	for _, l := range strings.Split(used, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			fmt.Sscan(v, &mem)
		}
	}
	limit := mem + 512<<10
	if err := c.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
		return err
	}
	if err := c.ConfigSet(ctx, "maxmemory", fmt.Sprint(limit)).Err(); err != nil {
		return err
	}
	from := Now()
	val := strings.Repeat("x", 4096)
	var evicted int64
	for end := time.Now().Add(2 * r.sc.TTL); time.Now().Before(end) && ctx.Err() == nil; {
		pipe := c.Pipeline()
		for range 32 {
			pipe.Set(ctx, fmt.Sprintf("%sjunk:%d", r.env.Prefix, rand.Int64()), val, time.Minute)
		}
		_, _ = pipe.Exec(ctx)
		time.Sleep(2 * time.Millisecond)
	}
	_ = c.ConfigSet(ctx, "maxmemory", "0").Err()
	// After the limit is lifted: a lock write in the same round trip could
	// still evict.
	to := Now()
	if info, err := c.Info(ctx, "stats").Result(); err == nil {
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "evicted_keys:"); ok {
				fmt.Sscan(v, &evicted)
			}
		}
	}
	// The junk goes, so that the next fill evicts again.
	it := c.Scan(ctx, 0, r.env.Prefix+"junk:*", 1000).Iterator()
	var junk []string
	for it.Next(ctx) {
		junk = append(junk, it.Val())
	}
	for len(junk) > 0 {
		n := min(len(junk), 500)
		c.Unlink(ctx, junk[:n]...)
		junk = junk[n:]
	}
	r.fault(Fault{Kind: FaultEvict, Worker: -1, From: from, To: to, Note: fmt.Sprintf("maxmemory %d KiB, volatile-lru, %d keys evicted so far", limit>>10, evicted)})
	return nil
}

// forceUnlock is an operator's ForceUnlock of a lock at its hand-off: right
// after a holder's Release returned, the lock is the first waiter's in
// Redis, and the waiter may not have read its hand-off message yet. The
// waiter must notice that its token was forced (the forced record) and
// start over, not wait out its limit on a dead token while the lock is
// free (Check's giveUps); a waiter that already believed in its lock
// overlaps the next holder until its renewal hears, as ForceUnlock's doc
// says (excused, on this name only).
func (r *run) forceUnlock(ctx context.Context) error {
	if r.lockAdmin == nil {
		return fmt.Errorf("torture: %s needs a Redis the run started", FaultForceUnlock)
	}
	select {
	case <-r.handed: // a stale one
	default:
	}
	var name string
	select {
	case name = <-r.handed:
	case <-time.After(2 * r.sc.TTL):
		return errNoTarget
	case <-ctx.Done():
		return nil
	}
	c, err := dlock.New(r.lockAdmin, dlock.WithPrefix(r.env.Prefix))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	from := Now()
	info, err := c.Inspect(ctx, name)
	if err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			return errNoTarget // nobody was in line
		}
		return fmt.Errorf("torture: inspect %q: %w", name, err)
	}
	_, err = c.ForceUnlock(ctx, name, info.Token)
	to := Now()
	if errors.Is(err, dlock.ErrNotHeld) {
		return errNoTarget // released or taken again meanwhile
	}
	if err != nil {
		return fmt.Errorf("torture: force unlock %q: %w", name, err)
	}
	// The grant it removed, by its fence: the one hold whose overlaps it
	// excuses (Check's forced). The worker, for the report; owners are
	// "w<id>" (spawn).
	w := -1
	if id, err := strconv.Atoi(strings.TrimPrefix(info.Owner, "w")); err == nil {
		w = id
	}
	r.fault(Fault{Kind: FaultForceUnlock, Worker: w, Name: name, Names: []string{name}, From: from, To: to, Fence: info.Fence,
		Note: fmt.Sprintf("token of %s forced %v after a hand-off", info.Owner, time.Duration(to-from).Round(time.Microsecond))})
	return nil
}

// awaitWaiter waits, for up to a TTL, until a worker waits for a lock: a
// fault of the server that waits must ride out then meets one.
func (r *run) awaitWaiter(ctx context.Context) {
	for end := time.Now().Add(r.sc.TTL); time.Now().Before(end) && r.pick(false, "") == nil; {
		if !sleepCtx(ctx, 5*time.Millisecond) {
			return
		}
	}
}
