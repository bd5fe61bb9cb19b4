package election_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Three candidates campaign, lead briefly and resign, over and over: never
// two leaders at once, and every term ends.
func TestOneLeaderAtATime(t *testing.T) {
	backends := map[string]func(t *testing.T) [3]dlock.Locker{
		"redis": func(t *testing.T) [3]dlock.Locker {
			rdb, _ := setup(t)
			return [3]dlock.Locker{newClient(t, rdb), newClient(t, rdb), newClient(t, rdb)}
		},
		"dlocktest": func(t *testing.T) [3]dlock.Locker {
			l := dlocktest.MustNew()
			t.Cleanup(func() { _ = l.Close(bg) })
			return [3]dlock.Locker{l, l, l}
		},
	}
	for name, lockers := range backends {
		t.Run(name, func(t *testing.T) {
			const rounds = 15
			var leaders, terms atomic.Int32
			errs := make(chan error, 3)
			var wg sync.WaitGroup
			for i, l := range lockers(t) {
				e := mustNew(t, l, "one-leader", election.WithIdentity(fmt.Sprint("cand-", i)), election.WithTTL(time.Second))
				wg.Go(func() {
					for r := range rounds {
						ctx, cancel := context.WithTimeout(bg, 10*time.Second)
						lead, err := e.Campaign(ctx)
						cancel()
						if err != nil {
							errs <- fmt.Errorf("%s round %d: %w", e.Identity(), r, err)
							return
						}
						if n := leaders.Add(1); n != 1 {
							errs <- fmt.Errorf("%s leads with %d others", e.Identity(), n-1)
						}
						time.Sleep(2 * time.Millisecond)
						leaders.Add(-1)
						if err := lead.Resign(bg); err != nil {
							errs <- fmt.Errorf("%s resign: %w", e.Identity(), err)
							return
						}
						terms.Add(1)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if got := terms.Load(); got != 3*rounds {
				t.Fatalf("%d of %d terms", got, 3*rounds)
			}
		})
	}
}

// A resignation hands leadership to the next candidate in line at once, in
// the order they lined up: by the release's message, not by a poll. The
// lease is long (5s) so a candidate that polled, or woke only when the
// leader's lease would run out, would show.
func TestResignHandsOverPromptlyInOrder(t *testing.T) {
	rdb, _ := setup(t)
	const name = "handover"
	ids := []string{"a", "b", "c", "d"}
	var es []*election.Election
	var clients []*dlock.Client
	for _, id := range ids {
		c := newClient(t, rdb)
		clients = append(clients, c)
		es = append(es, mustNew(t, c, name, election.WithIdentity(id), election.WithTTL(5*time.Second)))
	}
	lead, err := es[0].Campaign(bg)
	if err != nil {
		t.Fatal(err)
	}
	var pending []<-chan campaigned
	for i, e := range es[1:] {
		pending = append(pending, campaign(bg, e))
		waitWaiters(t, clients[0], name, int64(i+1))
	}
	var worst time.Duration
	for i, ch := range pending {
		resigned := time.Now()
		if err := lead.Resign(bg); err != nil {
			t.Fatal(err)
		}
		var got campaigned
		select {
		case got = <-ch:
		case <-time.After(3 * time.Second):
			t.Fatalf("%s did not lead within 3s of the resignation", ids[i+1])
		}
		if got.err != nil {
			t.Fatal(got.err)
		}
		took := got.at.Sub(resigned)
		worst = max(worst, took)
		if took > 300*time.Millisecond {
			t.Errorf("%s led %v after the resignation: not a hand-off", ids[i+1], took)
		}
		if who, err := es[0].Leader(bg); err != nil || who.Identity != ids[i+1] || who.Fence != got.l.Fence() {
			t.Fatalf("Leader = %+v, %v; want %s with fence %d", who, err, ids[i+1], got.l.Fence())
		}
		lead = got.l
	}
	_ = lead.Resign(bg)
	t.Logf("slowest of %d hand-offs: %v", len(pending), worst)
}

// A leader cut off from Redis (its connection blackholed) stops before
// another candidate leads: its context ends at its lease deadline, which
// comes before the lease ends in Redis.
func TestLeaderCutOffStopsBeforeAnotherLeads(t *testing.T) {
	rdb, srv := setup(t)
	proxy, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = cut.Close() })
	// The lease margin is a tenth of the TTL: 1s gives the 100ms a loaded
	// 2-core machine needs between a's deadline timer and b's grant.
	const name, ttl = "cut-off", time.Second
	a := mustNew(t, newClient(t, cut), name, election.WithIdentity("a"), election.WithTTL(ttl))
	b := mustNew(t, newClient(t, rdb), name, election.WithIdentity("b"), election.WithTTL(ttl))
	la, err := a.Campaign(bg)
	if err != nil {
		t.Fatal(err)
	}
	var aEnded atomic.Pointer[time.Time]
	context.AfterFunc(la.Context(), func() { now := time.Now(); aEnded.Store(&now) })
	chB := campaign(bg, b)
	waitWaiters(t, newClient(t, rdb), name, 1)

	proxy.Blackhole()
	cutAt := time.Now()
	var got campaigned
	select {
	case got = <-chB:
	case <-time.After(5 * time.Second):
		t.Fatal("b never led after a was cut off")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.l.Resign(bg)
	ended := aEnded.Load()
	if ended == nil {
		t.Fatalf("b leads %v after the cut, and a still believes it leads", got.at.Sub(cutAt))
	}
	if !ended.Before(got.at) {
		t.Fatalf("a stopped %v after b began to lead", ended.Sub(got.at))
	}
	if cause := context.Cause(la.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("a's leadership ended with %v; want ErrLockLost", cause)
	}
	if got.l.Fence() <= la.Fence() {
		t.Fatalf("b's fence %d is not above a's %d", got.l.Fence(), la.Fence())
	}
	t.Logf("cut at 0; a stopped at %v; b led at %v (TTL %v)", ended.Sub(cutAt), got.at.Sub(cutAt), ttl)
}

// A leader whose lock is force-unlocked: the next candidate leads at once
// (the force unlock hands the lock over), and the old leader's context ends
// at its next renewal, a third of the TTL later at most. Until then both
// believe they lead: the fence tells them apart.
func TestLeaderForceUnlocked(t *testing.T) {
	rdb, _ := setup(t)
	const name, ttl = "forced", 600 * time.Millisecond
	ca, admin := newClient(t, rdb), newClient(t, rdb)
	a := mustNew(t, ca, name, election.WithIdentity("a"), election.WithTTL(ttl))
	b := mustNew(t, newClient(t, rdb), name, election.WithIdentity("b"), election.WithTTL(ttl))
	la, err := a.Campaign(bg)
	if err != nil {
		t.Fatal(err)
	}
	chB := campaign(bg, b)
	waitWaiters(t, admin, name, 1)

	forced := time.Now()
	if _, err := admin.ForceUnlock(bg, name, la.Lock().Token()); err != nil {
		t.Fatal(err)
	}
	var got campaigned
	select {
	case got = <-chB:
	case <-time.After(3 * time.Second):
		t.Fatal("b never led after the force unlock")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.l.Resign(bg)
	if took := got.at.Sub(forced); took > 300*time.Millisecond {
		t.Errorf("b led %v after the force unlock: not handed over", took)
	}
	select {
	case <-la.Context().Done():
	case <-time.After(ttl/3 + 400*time.Millisecond):
		t.Fatal("a still believes it leads past its next renewal")
	}
	if !errors.Is(context.Cause(la.Context()), dlock.ErrLockLost) {
		t.Fatalf("a's leadership ended with %v; want ErrLockLost", context.Cause(la.Context()))
	}
	if got.l.Fence() <= la.Fence() {
		t.Fatalf("b's fence %d is not above a's %d", got.l.Fence(), la.Fence())
	}
	if err := la.Resign(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("a's Resign after the loss: %v; want ErrNotHeld", err)
	}
}

// A leader process stopped (SIGSTOP) past its lease: the next candidate
// leads once the lease has run out in Redis, Observe reports the change with
// identity and since, and the stopped leader, resumed, finds its leadership
// ended at once.
func TestLeaderPausedIsReplaced(t *testing.T) {
	rdb, srv := setup(t)
	const name, ttl = "paused", 600 * time.Millisecond
	proc := startCandidate(t, srv.Addr, name, "proc-a", ttl)
	line := proc.next(t, 10*time.Second)
	var fenceA int64
	if _, err := fmt.Sscanf(line, "leading %d", &fenceA); err != nil {
		t.Fatalf("candidate process: %q", line)
	}
	cb := newClient(t, rdb)
	b := mustNew(t, cb, name, election.WithIdentity("b"), election.WithTTL(ttl), election.WithObserveInterval(20*time.Millisecond))
	octx, stopObserving := context.WithCancel(bg)
	seen, err := b.Observe(octx)
	if err != nil {
		t.Fatal(err)
	}
	first := <-seen
	if first.Identity != "proc-a" || first.Fence != fenceA || time.Since(first.Since) > 10*time.Second {
		t.Fatalf("Observe first reported %+v; want proc-a with fence %d", first, fenceA)
	}
	chB := campaign(bg, b)
	waitWaiters(t, cb, name, 1)

	stopped := time.Now()
	if err := redistest.PauseProcess(proc.cmd.Process); err != nil {
		t.Fatal(err)
	}
	var got campaigned
	select {
	case got = <-chB:
	case <-time.After(ttl + 2*time.Second):
		t.Fatal("b never led while a was stopped")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.l.Resign(bg)
	took := got.at.Sub(stopped)
	// a's lease had between 2/3 of the TTL and all of it left when it
	// stopped: b had to wait it out, and not much longer.
	if took < ttl/2 || took > ttl+time.Second {
		t.Errorf("b led %v after a stopped; a's lease was %v", took, ttl)
	}
	var next election.LeaderInfo
	for next = range seen {
		if next.Identity != "" { // nobody leads, between two terms
			break
		}
	}
	stopObserving()
	for range seen { // the observer's goroutine ends
	}
	if next.Identity != "b" || next.Fence != got.l.Fence() || !next.Since.After(first.Since) {
		t.Fatalf("Observe then reported %+v; want b with fence %d, since after %v", next, got.l.Fence(), first.Since)
	}

	resumed := time.Now()
	if err := redistest.ResumeProcess(proc.cmd.Process); err != nil {
		t.Fatal(err)
	}
	line = proc.next(t, 2*time.Second)
	if !strings.HasPrefix(line, "lost ") || !strings.Contains(line, "lock lost") {
		t.Fatalf("resumed leader: %q; want its leadership lost", line)
	}
	t.Logf("b led %v after a stopped (TTL %v); resumed a learned of its loss within %v", took, ttl, time.Since(resumed))
	if got.l.Fence() <= fenceA {
		t.Fatalf("b's fence %d is not above a's %d", got.l.Fence(), fenceA)
	}
	_ = proc.stdin.Close()
}

// Run: callbacks in order across two candidates, a term after a loss, and
// every goroutine returned when Run does (TestMain checks for leaks).
func TestRun(t *testing.T) {
	rdb, _ := setup(t)
	const name, ttl = "run", 600 * time.Millisecond
	var mu sync.Mutex
	var events []string
	record := func(s string) {
		mu.Lock()
		events = append(events, s)
		mu.Unlock()
	}
	newLeaders := map[string]chan election.LeaderInfo{}
	started := map[string]chan context.Context{}
	run := func(id string, ctx context.Context) <-chan error {
		e := mustNew(t, newClient(t, rdb), name, election.WithIdentity(id), election.WithTTL(ttl),
			election.WithObserveInterval(20*time.Millisecond))
		leaders, starts := make(chan election.LeaderInfo, 16), make(chan context.Context, 4)
		newLeaders[id], started[id] = leaders, starts
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, election.Callbacks{
				OnStartedLeading: func(ctx context.Context) {
					record(id + " started")
					starts <- ctx
					<-ctx.Done()
					time.Sleep(50 * time.Millisecond) // winding down: the next must wait
					record(id + " returned")
				},
				OnStoppedLeading: func() { record(id + " stopped") },
				OnNewLeader: func(li election.LeaderInfo) {
					select {
					case leaders <- li:
					default:
					}
				},
			})
		}()
		return done
	}
	actx, stopA := context.WithCancel(bg)
	defer stopA()
	doneA := run("a", actx)
	aCtx := <-started["a"]
	bctx, stopB := context.WithCancel(bg)
	defer stopB()
	doneB := run("b", bctx)
	waitWaiters(t, newClient(t, rdb), name, 1)

	stopA() // a's Run ends: its term ends, b's begins
	if err := <-doneA; err != nil {
		t.Fatalf("a's Run: %v", err)
	}
	if !errors.Is(context.Cause(aCtx), context.Canceled) {
		t.Fatalf("a's term ended with %v", context.Cause(aCtx))
	}
	bCtx := <-started["b"]
	mu.Lock()
	got := strings.Join(events, ", ")
	mu.Unlock()
	// a's work returned before b's began; a's OnStoppedLeading comes after
	// its resignation, which is what lets b in, so it may come after b's
	// start (documented on Callbacks.OnStoppedLeading).
	if !strings.HasPrefix(got, "a started, a returned, ") || !strings.Contains(got, "a stopped") ||
		strings.Index(got, "b started") < strings.Index(got, "a returned") {
		t.Fatalf("events: %s", got)
	}
	// b sees a, then itself.
	var ids []string
	for li := range newLeaders["b"] {
		if li.Identity != "" && (len(ids) == 0 || ids[len(ids)-1] != li.Identity) {
			ids = append(ids, li.Identity)
		}
		if li.Identity == "b" {
			break
		}
	}
	if strings.Join(ids, ",") != "a,b" {
		t.Fatalf("b's OnNewLeader saw %v; want a then b", ids)
	}

	// b loses its lock: its term ends with the loss, and having no rival
	// it leads again, a new term with a larger fence.
	if n := rdb.Del(bg, "dlock:{"+name+"}").Val(); n != 1 {
		t.Fatal("b's lock key was not there")
	}
	select {
	case <-bCtx.Done():
	case <-time.After(ttl):
		t.Fatal("b's term did not end after its lock was deleted")
	}
	if !errors.Is(context.Cause(bCtx), dlock.ErrLockLost) {
		t.Fatalf("b's term ended with %v", context.Cause(bCtx))
	}
	select {
	case <-started["b"]:
	case <-time.After(3 * time.Second):
		t.Fatal("b did not lead again after losing its term")
	}
	stopB()
	if err := <-doneB; err != nil {
		t.Fatalf("b's Run: %v", err)
	}
	mu.Lock()
	var bs []string
	for _, e := range events {
		if strings.HasPrefix(e, "b ") {
			bs = append(bs, e)
		}
	}
	got = strings.Join(events, ", ")
	mu.Unlock()
	if strings.Join(bs, ", ") != "b started, b returned, b stopped, b started, b returned, b stopped" {
		t.Fatalf("events: %s", got)
	}
}

// Without WithIdentity a candidate is the Client's owner text.
func TestDefaultIdentity(t *testing.T) {
	rdb, _ := setup(t)
	c := newClient(t, rdb, dlock.WithDefaultOwner("svc/7"))
	e := mustNew(t, c, "default-id")
	lead, err := e.Campaign(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Resign(bg)
	if who, err := e.Leader(bg); err != nil || who.Identity != "svc/7" || e.Identity() != "svc/7" {
		t.Fatalf("Leader = %+v, %v, Identity() = %q; want the Client's owner svc/7", who, err, e.Identity())
	}
}

// noInspect hides the Locker's Inspect, as redlock has none.
type noInspect struct{ dlock.Locker }

func TestBadInput(t *testing.T) {
	l := dlocktest.MustNew()
	t.Cleanup(func() { _ = l.Close(bg) })
	for _, tt := range []struct {
		name   string
		locker dlock.Locker
		lock   string
		opts   []election.Option
		want   error
	}{
		{"nil locker", nil, "e", nil, dlock.ErrInvalidOption},
		{"empty name", l, "", nil, dlock.ErrInvalidName},
		{"long name", l, strings.Repeat("e", dlock.MaxNameLength+1), nil, dlock.ErrInvalidName},
		{"empty identity", l, "e", []election.Option{election.WithIdentity("")}, dlock.ErrInvalidOption},
		{"zero ttl", l, "e", []election.Option{election.WithTTL(0)}, dlock.ErrInvalidTTL},
		{"fast observer", l, "e", []election.Option{election.WithObserveInterval(time.Millisecond)}, dlock.ErrInvalidOption},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, err := election.New(tt.locker, tt.lock, tt.opts...)
			var de *dlock.Error
			if e != nil || !errors.Is(err, tt.want) || !errors.As(err, &de) || de.Name != tt.lock {
				t.Fatalf("New = %v, %v; want an *dlock.Error naming %q matching %v", e, err, tt.lock, tt.want)
			}
		})
	}
	e := mustNew(t, l, "e", election.WithTTL(time.Hour*48))
	if _, err := e.Campaign(bg); !errors.Is(err, dlock.ErrInvalidTTL) {
		t.Fatalf("Campaign with a TTL above the Locker's maximum: %v", err)
	}
	if err := mustNew(t, l, "e").Run(bg, election.Callbacks{}); !errors.Is(err, dlock.ErrInvalidOption) {
		t.Fatalf("Run without OnStartedLeading: %v", err)
	}
	blind := mustNew(t, noInspect{l}, "e")
	if _, err := blind.Leader(bg); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Leader on a Locker without Inspect: %v", err)
	}
	if _, err := blind.Observe(bg); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Observe on a Locker without Inspect: %v", err)
	}
	if _, err := mustNew(t, l, "e").Leader(bg); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader of an election nobody leads: %v", err)
	}
	// Campaigning under one's own leadership would wait for oneself.
	lead, err := mustNew(t, l, "e").Campaign(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Resign(bg)
	if _, err := mustNew(t, l, "e").Campaign(lead.Context()); !errors.Is(err, dlock.ErrReentrant) {
		t.Fatalf("Campaign under its own leadership: %v", err)
	}
}
