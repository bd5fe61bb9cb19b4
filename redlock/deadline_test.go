package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/observe"
	"github.com/dlock-go/dlock/redlock"
)

// plainClients returns clients with go-redis' defaults where they matter
// here: no ContextTimeoutEnabled, so a call on a stopped node waits for the
// ReadTimeout (3s) whatever its context says. retries: go-redis' MaxRetries
// (0: its default of 3; -1: none).
func plainClients(t *testing.T, srvs []*redistest.Server, retries int) []redis.UniversalClient {
	t.Helper()
	rdbs := make([]redis.UniversalClient, len(srvs))
	for i, s := range srvs {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: retries})
		t.Cleanup(func() { _ = rdb.Close() })
		if err := rdb.Ping(bg).Err(); err != nil {
			t.Fatal(err)
		}
		rdbs[i] = rdb
	}
	return rdbs
}

// pauseNode stops srv's process (SIGSTOP) until the end of the test. Call
// it after the Redlocks are made: cleanups run last first, so the node
// answers again before their Close waits for the calls stuck on it.
func pauseNode(t *testing.T, srv *redistest.Server) {
	t.Helper()
	srv.Pause()
	t.Cleanup(srv.Resume)
}

// TestContextEndsBeforeLiveKeysExpire (issue 17, item 1): with one node of
// three stopped and go-redis' defaults (a renewal stuck there for the 3s
// ReadTimeout), and no renewal getting through on the two others, the
// holder's context ends before the keys on the live nodes
// expire, by a margin the holder can use to stop its work (the single-node
// lock's: a tenth of the TTL; at least 50ms of the 90ms are asked here, the
// rest is left to scheduling), and a second Redlock gets the lock only after
// the first context has ended.
func TestContextEndsBeforeLiveKeysExpire(t *testing.T) {
	for _, renew := range []bool{true, false} {
		name := "renewal"
		if !renew {
			name = "without renewal"
		}
		t.Run(name, func(t *testing.T) {
			srvs, probes := startNodes(t, 3)
			rdbs := plainClients(t, srvs, 0)
			// Two live nodes of three confirm renewals, which keeps the
			// lock (TestStalledNodeKeepsLock): their renewals fail here,
			// at once, so that the lock ends while a renewal is stuck on
			// the stopped node.
			fail := &failRefresh{}
			for _, rdb := range rdbs[:2] {
				rdb.AddHook(fail)
			}
			r := newRedlock(t, rdbs)
			second := newRedlock(t, probes)
			const ttl = 900 * time.Millisecond
			opts := []dlock.AcquireOption{dlock.WithTTL(ttl)}
			if !renew {
				opts = append(opts, dlock.WithoutRenewal())
			}
			start := time.Now()
			l, err := r.TryAcquire(bg, "stall", opts...)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
			pauseNode(t, srvs[2])
			fail.on.Store(true)

			// At the moment the context ends, the live nodes' keys must
			// still have a margin left, on the one clock the servers and
			// the test share. No renewal reaches nodes 0 and 1 (renewal
			// off, or failing there), so their expiry is read now: once
			// the lock is lost its keys are given up at once.
			type end struct {
				at     time.Time
				expire []int64 // PEXPIRETIME on nodes 0 and 1, unix ms
			}
			var expire []int64
			for _, p := range probes[:2] {
				expire = append(expire, p.PExpireTime(bg, "dlock:{stall}").Val().Milliseconds())
			}
			ended := make(chan end, 1)
			go func() {
				<-l.Context().Done()
				ended <- end{at: time.Now(), expire: expire}
			}()

			l2, err := second.Acquire(bg, "stall", dlock.WithTTL(ttl), dlock.WithWait(5*time.Second))
			if err != nil {
				t.Fatalf("second Redlock: %v", err)
			}
			got := time.Now()
			alive := l.Context().Err() == nil
			defer l2.Release(bg)
			if alive {
				t.Fatalf("a second Redlock got the lock %v after the first acquisition while the first holder's context is alive",
					got.Sub(start).Round(time.Millisecond))
			}
			var e end
			select {
			case e = <-ended:
			case <-time.After(3 * time.Second):
				t.Fatal("no PEXPIRETIME read 3s after the context ended")
			}
			for i, exp := range e.expire {
				if exp < 0 {
					t.Fatalf("node %d: the key was gone (%d) when the holder's context ended, %v after the acquisition",
						i, exp, e.at.Sub(start).Round(time.Millisecond))
				}
				left := time.UnixMilli(exp).Sub(e.at)
				t.Logf("node %d: context ended %v after the acquisition, %v before the key expired; second holder in at %v",
					i, e.at.Sub(start).Round(time.Millisecond), left.Round(time.Millisecond), got.Sub(start).Round(time.Millisecond))
				if left < 50*time.Millisecond {
					t.Fatalf("node %d: the holder's context ended %v before the key expired there; want at least 50ms (a tenth of the TTL less scheduling)",
						i, left.Round(time.Millisecond))
				}
			}
			if d := e.at.Sub(start); d > ttl {
				t.Fatalf("context ended %v after the acquisition began, past the %v lease", d.Round(time.Millisecond), ttl)
			}
			if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) {
				t.Fatalf("cause %v, want ErrLockLost", cause)
			}
		})
	}
}

// TestReleaseEndsContextBeforeKeysAreFreed: Release and Close free the keys
// on the nodes that answer at once, while a stopped node keeps them waiting
// (3s, go-redis' ReadTimeout). The holder's context must have ended before
// any key is freed: else a second Redlock takes the lock on the live nodes
// while the first holder's work still runs under a live context.
func TestReleaseEndsContextBeforeKeysAreFreed(t *testing.T) {
	release := func(_ *redlock.Redlock, l dlock.Lock) error { return l.Release(bg) }
	closeAll := func(r *redlock.Redlock, _ dlock.Lock) error { return r.Close(bg) }
	cases := []struct {
		name  string
		renew bool
		ttl   time.Duration
		// before: how long after the node stopped the lock is ended; with
		// a TTL of 900ms, 400ms finds a renewal stuck on the stopped node.
		before time.Duration
		end    func(r *redlock.Redlock, l dlock.Lock) error
	}{
		{"Release", true, 10 * time.Second, 0, release},
		{"Close", true, 10 * time.Second, 0, closeAll},
		{"Close without renewal", false, 10 * time.Second, 0, closeAll},
		{"Close during a renewal", true, 900 * time.Millisecond, 400 * time.Millisecond, closeAll},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srvs, probes := startNodes(t, 3)
			r := newRedlock(t, plainClients(t, srvs, -1))
			second := newRedlock(t, probes)
			opts := []dlock.AcquireOption{dlock.WithTTL(c.ttl)}
			if !c.renew {
				opts = append(opts, dlock.WithoutRenewal())
			}
			l, err := r.TryAcquire(bg, "free", opts...)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
			pauseNode(t, srvs[2])
			time.Sleep(c.before)
			if l.Context().Err() != nil {
				t.Fatalf("context ended before the test ended the lock: %v", context.Cause(l.Context()))
			}

			ended := make(chan error, 1)
			go func() { ended <- c.end(r, l) }()
			l2, err := second.Acquire(bg, "free", dlock.WithTTL(time.Second), dlock.WithWait(2*time.Second))
			if err != nil {
				t.Fatalf("second Redlock: %v", err)
			}
			alive := l.Context().Err() == nil
			defer l2.Release(bg)
			if alive {
				t.Fatalf("%s: a second Redlock got the lock while the first holder's context is alive", c.name)
			}
			cause := context.Cause(l.Context())
			if !errors.Is(cause, dlock.ErrReleased) {
				t.Fatalf("cause %v, want ErrReleased", cause)
			}
			if closed := errors.Is(cause, dlock.ErrClosed); closed != (c.name != "Release") {
				t.Fatalf("%s: cause %v, matching ErrClosed: %v", c.name, cause, closed)
			}
			srvs[2].Resume()
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s did not return 10s after the node came back", c.name)
			}
		})
	}
}

// TestLateRefreshDoesNotRevive: a Refresh sent before a majority of nodes
// stopped, and confirmed by all of them once they run again, after the
// deadline ended the lock but before their keys expired. The confirmation
// comes from a quorum, in time for the validity it would give (sent at
// 0.6s, a TTL of 2s), yet the lock stays lost: Refresh reports ErrNotHeld,
// TTL too, and Release frees the keys the late Refresh extended.
// (A background renewal cannot be held this way: the loss cancels it, and
// go-redis then drops its connection, and the stopped node the command.)
func TestLateRefreshDoesNotRevive(t *testing.T) {
	srvs, probes := startNodes(t, 3)
	rdbs := plainClients(t, srvs, -1)
	// The loss gives the keys up on every node, and on nodes 1 and 2 that
	// release would wait in their sockets with the Refresh, in an order
	// Redis picks: it is held back until the Refresh returned, so that the
	// late confirmations land first.
	refreshDone := make(chan struct{})
	hold := &holdReleases{until: refreshDone}
	for _, rdb := range rdbs[1:] {
		rdb.AddHook(hold)
	}
	r := newRedlock(t, rdbs)
	const ttl = 2 * time.Second // deadline at 1.8s
	l, err := r.TryAcquire(bg, "late", dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	// Nodes 1 and 2 keep the keys until 2.6s, not 2s: a wide window between
	// the deadline and their expiry for the late Refresh to land in on a
	// busy machine. The validity, the holder's own, is not moved by it.
	for _, p := range probes[1:] {
		if err := p.PExpire(bg, "dlock:{late}", ttl+600*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	pauseNode(t, srvs[1])
	pauseNode(t, srvs[2])
	refreshed := make(chan error, 1)
	time.Sleep(400 * time.Millisecond)
	go func() {
		refreshed <- l.Refresh(bg, ttl)
		close(refreshDone)
	}()
	select {
	case <-l.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("context alive 3s after two nodes of three stopped, with a TTL of 2s")
	}
	srvs[1].Resume()
	srvs[2].Resume()
	var rerr error
	select {
	case rerr = <-refreshed:
	case <-time.After(3 * time.Second):
		t.Fatal("Refresh did not return 3s after the nodes ran again")
	}
	// Proof that a quorum confirmed the Refresh after the deadline: only
	// then does Refresh report the lock's own end (its context's cause, a
	// loss), not the nodes' answers. Refresh returns once a quorum
	// confirmed, so the other stopped node may not have run it yet.
	if !errors.Is(rerr, dlock.ErrNotHeld) || !errors.Is(rerr, dlock.ErrLockLost) {
		t.Fatalf("Refresh confirmed after the deadline: %v, want ErrNotHeld with the loss", rerr)
	}
	// The loss's give-up reaches nodes 1 and 2 only after the Refresh
	// returned: held back until then, or sent then (at the end of the
	// last confirmed lease, 2s, past the deadline). Without it the test
	// proves nothing.
	waitFor(t, "the loss's give-up on nodes 1 and 2", func() bool { return hold.held.Load() > 0 })
	if left, err := l.TTL(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("TTL after the late Refresh: %v, %v; want ErrNotHeld", left, err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release of a lost lock: %v, want ErrNotHeld", err)
	}
	// Release returns at a quorum; the loss's give-ups and the release of
	// the last node may still be on their way. Each writes the token's
	// record in the script that frees the key, so once every node has the
	// record, a key still there was taken back after its release (revived),
	// not left for a release to come. The keys' own expiry writes no record.
	record := "dlock:{late}:r:" + asLock(t, l).Token()
	waitFor(t, "the token's release on every node", func() bool { return exists(probes, record) == len(probes) })
	if n := exists(probes, "dlock:{late}"); n != 0 {
		t.Fatalf("keys left on %d nodes after Release", n)
	}
}

// slowReply is a go-redis hook that, while on, holds the reply of the
// refresh script (a script call with one key) for delay after the node
// answered: the node has extended the lease, the caller learns it late.
type slowReply struct {
	on    atomic.Bool
	delay time.Duration
}

func (h *slowReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		if h.on.Load() && len(a) > 2 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "1" {
			time.Sleep(h.delay)
		}
		return err
	}
}

func (h *slowReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// blockingLost is an observer whose OnLost waits (at most 3s) until
// release is closed: a slow metrics exporter or logger.
type blockingLost struct {
	observe.BaseObserver
	entered, release chan struct{}
	once             sync.Once
}

func (o *blockingLost) OnLost(observe.LostEvent) {
	o.once.Do(func() { close(o.entered) })
	select {
	case <-o.release:
	case <-time.After(3 * time.Second):
	}
}

// TestRefreshAcrossLossNamesItsCause: a Refresh whose quorum confirms while
// the lock's validity has just run out, with the loss still being told to a
// slow observer (the context is cancelled after the observers), fails with
// ErrNotHeld and the loss's cause, not with an error text reading
// "%!w(<nil>)" (the context's cause read before the context ended).
func TestRefreshAcrossLossNamesItsCause(t *testing.T) {
	srvs, _ := startNodes(t, 3)
	hook := &slowReply{delay: 300 * time.Millisecond}
	rdbs := make([]redis.UniversalClient, len(srvs))
	for i, s := range srvs {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		rdb.AddHook(hook)
		t.Cleanup(func() { _ = rdb.Close() })
		rdbs[i] = rdb
	}
	// The interleaving rests on two timers, 140-160ms apart from missing
	// it: the test's own Sleep (a Refresh sent after the validity ran out
	// finds the lock lost and never reaches the nodes) and the validity's
	// deadline (a Refresh heard before it extends the lock). A round that
	// missed it is run again, a few times at most; one that forced it is
	// judged.
	for round := range 3 {
		forced, err := refreshAcrossLoss(t, rdbs, round, hook)
		if !forced {
			t.Logf("round %d: the interleaving was not forced (%v); again", round, err)
			continue
		}
		t.Logf("Refresh: %v", err)
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("Refresh after the validity ran out: %v, want ErrNotHeld", err)
		}
		if strings.Contains(err.Error(), "%!") {
			t.Errorf("error text with a nil error in it: %q", err)
		}
		if !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("Refresh error %v does not carry the loss (ErrLockLost)", err)
		}
		return
	}
	t.Fatal("the interleaving was not forced in 3 rounds")
}

// refreshAcrossLoss is one round of TestRefreshAcrossLossNamesItsCause: a
// Refresh sent before the validity ran out, whose replies are held until
// after it, with the loss told to a slow observer meanwhile. forced reports
// whether it went that way.
func refreshAcrossLoss(t *testing.T, rdbs []redis.UniversalClient, round int, hook *slowReply) (forced bool, got error) {
	obs := &blockingLost{entered: make(chan struct{}), release: make(chan struct{})}
	defer close(obs.release)
	r := newRedlock(t, rdbs, redlock.WithObserver(obs))
	const ttl = 600 * time.Millisecond // validity 540ms
	l, err := r.TryAcquire(bg, "cause"+strconv.Itoa(round), dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	// Loads the refresh script on every node: a NOSCRIPT reply held by the
	// hook would send the script again only after the lease ended.
	if err := l.Refresh(bg, ttl); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if l.Context().Err() != nil {
		return false, context.Cause(l.Context()) // woke after the validity
	}
	hook.on.Store(true)
	got = l.Refresh(bg, ttl) // confirmed at ~400ms, heard at ~700ms
	hook.on.Store(false)
	select {
	case <-obs.entered:
		return true, got
	default:
		return false, got // heard before the validity ran out
	}
}

// TestWaitZeroMakesOneAttempt (issue 17, item 8): Acquire with WithWait(0)
// is one attempt, as TryAcquire: it takes a free lock, and on a busy one it
// reports the holder's lease, which only an attempt can learn.
func TestWaitZeroMakesOneAttempt(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	sent := &counter{}
	for _, rdb := range rdbs {
		rdb.AddHook(sent)
	}
	l, err := r.Acquire(bg, "zero", dlock.WithWait(0), dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("Acquire(WithWait(0)) of a free lock: %v (%d commands sent)", err, sent.n.Load())
	}
	defer l.Release(bg)
	other := newRedlock(t, rdbs)
	start := time.Now()
	_, err = other.Acquire(bg, "zero", dlock.WithWait(0), dlock.WithTTL(5*time.Second))
	var busy *dlock.NotObtainedError
	if !errors.As(err, &busy) || busy.HolderTTL < time.Second {
		t.Fatalf("Acquire(WithWait(0)) of a busy lock: %v, want not obtained with the holder's lease", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Acquire(WithWait(0)) took %v", d)
	}
}

// TestTryAcquireKeepsCallersDeadline (issue 17, item 8): with two nodes of
// three stopped and clients without ContextTimeoutEnabled (a call there
// waits for the 3s ReadTimeout), TryAcquire returns by the caller's
// deadline of 300ms, with its error, and leaves no grant behind.
func TestTryAcquireKeepsCallersDeadline(t *testing.T) {
	srvs, probes := startNodes(t, 3)
	r := newRedlock(t, plainClients(t, srvs, 0))
	warm, err := r.TryAcquire(bg, "warm") // scripts loaded on every node
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, warm).Fences(), 0) })
	if err := warm.Release(bg); err != nil {
		t.Fatal(err)
	}
	pauseNode(t, srvs[1])
	pauseNode(t, srvs[2])
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = r.TryAcquire(ctx, "deadline", dlock.WithTTL(10*time.Second))
	d := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire with two nodes stopped: %v, want the context's deadline", err)
	}
	if d > 300*time.Millisecond+150*time.Millisecond {
		t.Fatalf("TryAcquire returned %v after it began, past the caller's deadline of 300ms", d.Round(time.Millisecond))
	}
	if n := probes[0].Exists(bg, "dlock:{deadline}").Val(); n != 0 {
		t.Fatal("node 0 keeps the grant of a failed attempt")
	}
}

// TestCrossingRefreshesNeverOverstateValidity: Refreshes of a long and a
// short TTL sent at once, their replies crossing, never leave the holder's
// validity past any node's lease: the validity keeps the longest confirmed
// lease, and the nodes never shorten one.
func TestCrossingRefreshesNeverOverstateValidity(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	l, err := r.TryAcquire(bg, "cross", dlock.WithTTL(time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	// Every node in the lock, so that every node is refreshed: a node that
	// has not joined yet is not, and keeps its first lease.
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	for round := range 10 {
		long, short := make(chan error, 1), make(chan error, 1)
		go func() { long <- l.Refresh(bg, 3*time.Second) }()
		go func() { short <- l.Refresh(bg, 500*time.Millisecond) }()
		if err := <-long; err != nil {
			t.Fatalf("round %d: Refresh(3s): %v", round, err)
		}
		if err := <-short; err != nil {
			t.Fatalf("round %d: Refresh(500ms): %v", round, err)
		}
		left, err := l.TTL(bg)
		if err != nil {
			t.Fatal(err)
		}
		// Refresh returns once a quorum confirmed: the validity is a
		// quorum's, and a node not heard from yet may still have its
		// older lease.
		var leases []time.Duration
		for _, rdb := range rdbs {
			leases = append(leases, rdb.PTTL(bg, "dlock:{cross}").Val())
		}
		covered := 0
		for _, pttl := range leases {
			if pttl >= left {
				covered++
			}
		}
		if covered < 2 {
			t.Fatalf("round %d: validity %v left, node leases %v: fewer than a quorum cover it", round, left, leases)
		}
		if left < 2*time.Second {
			t.Fatalf("round %d: validity %v left after Refresh(3s): the short Refresh shortened it", round, left)
		}
	}
}

// holdReleases is a go-redis hook that holds back the release script (a
// script call with 5 keys and 7 arguments) until until is closed, or 3s.
type holdReleases struct {
	until <-chan struct{}
	held  atomic.Int32
}

func (h *holdReleases) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdReleases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) == 15 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "5" {
			h.held.Add(1)
			select {
			case <-h.until:
			case <-time.After(3 * time.Second):
			}
		}
		return next(ctx, cmd)
	}
}

func (h *holdReleases) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLapsedLockKeepsMarginBeforeNextHolder: a Lock whose validity ran out
// gives its keys back (TestLossReleasesWhatIsHeld), but not before the end
// of the last lease a quorum confirmed: the margin between the validity and
// that end is the holder's, for its work to see its context end and stop,
// as with a Client (the root package's test of the same name). A second
// Redlock granted the lock on a quorum whose reply came before start+ttl
// got it inside the first lease.
func TestLapsedLockKeepsMarginBeforeNextHolder(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	r := newRedlock(t, rdbs)
	second := newRedlock(t, probes)
	const ttl = time.Second // margin 100ms
	start := time.Now()
	l, err := r.TryAcquire(bg, "margin", dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	serverEnd := start.Add(ttl)
	select {
	case <-l.Context().Done():
	case <-time.After(3 * ttl):
		t.Fatal("the lock's context did not end at the end of its validity")
	}
	for give := time.Now().Add(2 * ttl); ; time.Sleep(5 * time.Millisecond) {
		o, err := second.TryAcquire(bg, "margin", dlock.WithTTL(ttl))
		replied := time.Now()
		if err == nil {
			_ = o.Release(bg)
			if replied.Before(serverEnd) {
				t.Fatalf("a second holder was granted the lock %v before the first holder's lease could end on the nodes (its context ended %v before it)",
					serverEnd.Sub(replied).Round(time.Millisecond), ttl/10)
			}
			return
		}
		if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryAcquire: %v", err)
		}
		if time.Now().After(give) {
			t.Fatalf("nobody got the lapsed lock within %v of its loss", 2*ttl)
		}
	}
}

// lateRefreshReplies holds back, once armed, the replies of refresh
// commands (EVALSHA/EVAL, one key, token, ttl) after the node ran them
// (not a NOSCRIPT answer: the EVAL sent next is what runs).
type lateRefreshReplies struct {
	armed atomic.Bool
	delay time.Duration
}

func (h *lateRefreshReplies) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lateRefreshReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *lateRefreshReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		if err == nil && h.armed.Load() && len(a) == 6 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "1" {
			time.Sleep(h.delay)
		}
		return err
	}
}

// TestLateLapseGiveBackKeepsMarginAfterContextEnd: as the root package's
// test of the name. A Refresh that ran on every node (leases to
// start+0.3s+ttl) but whose replies came too late extends no validity;
// the deadline timer is held back, and the loss is found by Context past
// served (start+ttl). lost gives the keys back at served, already past: at
// once, the instant the context ends, while the nodes' leases would have
// kept the next holder out for ~250 ms more.
func TestLateLapseGiveBackKeepsMarginAfterContextEnd(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	hook := &lateRefreshReplies{delay: 1500 * time.Millisecond}
	for _, rdb := range rdbs {
		rdb.AddHook(hook)
	}
	r := newRedlock(t, rdbs)
	second := newRedlock(t, probes)
	const ttl = time.Second
	start := time.Now()
	l, err := r.TryAcquire(bg, "late-lapse", dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	redlock.HoldBackDeadline(l.(*redlock.Lock))
	time.Sleep(time.Until(start.Add(300 * time.Millisecond)))
	hook.armed.Store(true)
	refreshed := make(chan error, 1)
	go func() { refreshed <- l.Refresh(bg, ttl) }()
	time.Sleep(time.Until(start.Add(ttl + 50*time.Millisecond)))
	ctx := l.Context()
	ended := time.Now()
	if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(ctx))
	}
	margin := ttl / 10
	for time.Since(ended) < margin {
		o, err := second.TryAcquire(bg, "late-lapse", dlock.WithTTL(ttl))
		if err == nil {
			got := time.Since(ended)
			_ = o.Release(bg)
			if got >= margin {
				// Sent inside the margin, answered after it: the grant
				// may have come after the margin too (CI: 101ms).
				break
			}
			t.Fatalf("a second holder got the lock %v after the first holder's context ended (margin %v); the refreshed leases would have kept it out ~%v more",
				got.Round(time.Millisecond), margin, start.Add(300*time.Millisecond+ttl).Sub(ended).Round(time.Millisecond))
		}
		if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryAcquire: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	hook.armed.Store(false)
	<-refreshed
}
