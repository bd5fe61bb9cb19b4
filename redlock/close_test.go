package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
)

// TestCloseStopsEverything: Close releases what is held, ends every lock's
// context and every wait, and leaves no goroutine behind: not the locks'
// watches, not a wait, not the give-backs still retrying on a dead node.
func TestCloseStopsEverything(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	for _, rdb := range rdbs {
		_ = rdb.Ping(bg).Err() // open the pools before counting goroutines
	}
	ignore := goleak.IgnoreCurrent()
	obs := &recorder{}
	r, err := redlock.New(rdbs, redlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(bg) })
	srvs[2].Kill() // every attempt's lost reply there is given back, with retries

	var locks []dlock.Lock
	for _, name := range []string{"a", "b", "c"} {
		l, err := r.TryAcquire(bg, name, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	fixed, err := r.TryAcquire(bg, "fixed", dlock.WithTTL(10*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	locks = append(locks, fixed)
	waiting := make(chan error, 1)
	go func() {
		_, err := r.Acquire(bg, "a", dlock.WithWait(30*time.Second))
		waiting <- err
	}()
	time.Sleep(100 * time.Millisecond) // the wait is under way

	start := time.Now()
	if err := r.Close(bg); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v", d)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Fatalf("a wait ended by Close: %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a wait goes on 2s after Close returned")
	}
	for _, l := range locks {
		if l.Context().Err() == nil {
			t.Fatalf("lock %q: context alive after Close", l.Name())
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrClosed) || !errors.Is(cause, dlock.ErrReleased) {
			t.Fatalf("lock %q: cause %v, want ErrClosed and ErrReleased", l.Name(), cause)
		}
		if n := exists(rdbs[:2], "dlock:{"+l.Name()+"}"); n != 0 {
			t.Fatalf("lock %q still on %d nodes after Close", l.Name(), n)
		}
		if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("Release after Close: %v", err)
		}
	}
	if _, _, _, releases := obs.counts(); releases != len(locks) {
		t.Fatalf("%d release events for the %d locks Close released", releases, len(locks))
	}
	goleak.VerifyNone(t, ignore, redisDialer)

	if _, err := r.TryAcquire(bg, "after"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
	if _, err := r.Acquire(bg, "after"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if err := r.Close(bg); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestAcquireRacingClose: acquisitions that race Close either fail with
// ErrClosed or return a lock that Close released; none leaves a lock on
// the nodes or a goroutine behind.
func TestAcquireRacingClose(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	for _, rdb := range rdbs {
		_ = rdb.Ping(bg).Err()
	}
	ignore := goleak.IgnoreCurrent()
	r, err := redlock.New(rdbs)
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan dlock.Lock, 20)
	for i := range 20 {
		go func() {
			l, err := r.Acquire(bg, "race"+string(rune('a'+i)), dlock.WithTTL(10*time.Second))
			if err != nil && !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("acquisition racing Close: %v", err)
			}
			results <- l
		}()
	}
	time.Sleep(2 * time.Millisecond)
	if err := r.Close(bg); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		select {
		case l := <-results:
			if l != nil && l.Context().Err() == nil {
				t.Errorf("lock %q returned alive across Close", l.Name())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("an acquisition racing Close did not return in 5s")
		}
	}
	goleak.VerifyNone(t, ignore, redisDialer)
	for i := range 20 {
		if n := exists(rdbs, "dlock:{race"+string(rune('a'+i))+"}"); n != 0 {
			t.Fatalf("lock race%c on %d nodes after Close", 'a'+i, n)
		}
	}
}

// TestCloseRacingRenewalLeavesNothing: Close at offsets around the first
// renewal (ttl/3) of a lock: the context ends, the keys are gone on every
// node and stay gone, and no goroutine of the Redlock is left.
func TestCloseRacingRenewalLeavesNothing(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	for _, rdb := range rdbs {
		_ = rdb.Ping(bg).Err()
	}
	ignore := goleak.IgnoreCurrent()
	const ttl = 300 * time.Millisecond
	for i := range 20 {
		r, err := redlock.New(rdbs)
		if err != nil {
			t.Fatal(err)
		}
		name := "closerenew" + strconv.Itoa(i)
		l, err := r.TryAcquire(bg, name, dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl/3 - 10*time.Millisecond + time.Duration(i)*time.Millisecond)
		if err := r.Close(bg); err != nil {
			t.Fatal(err)
		}
		if l.Context().Err() == nil {
			t.Fatalf("round %d: context alive after Close", i)
		}
		if n := exists(rdbs, "dlock:{"+name+"}"); n != 0 {
			t.Fatalf("round %d: key on %d nodes after Close", i, n)
		}
		time.Sleep(50 * time.Millisecond) // a renewal still out would land now
		if n := exists(rdbs, "dlock:{"+name+"}"); n != 0 {
			t.Fatalf("round %d: key revived on %d nodes after Close", i, n)
		}
	}
	goleak.VerifyNone(t, ignore, redisDialer)
}

// slowRelease delays the release script (5 keys) on one node, as a slow
// link would, without looking at the context.
type slowRelease struct {
	counter
	d time.Duration
}

func (h *slowRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// The release script: 5 keys, ARGV[3] (give up) '0' or '1' (the
		// acquire script has 7 keys).
		if a := cmd.Args(); len(a) > 10 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[2]) == "5" &&
			(fmt.Sprint(a[10]) == "0" || fmt.Sprint(a[10]) == "1") {
			time.Sleep(h.d)
		}
		return next(ctx, cmd)
	}
}

// TestCloseDuringWriteBackLeavesNoKey: Close while an acquisition waits for
// its fence write-back. The acquisition fails with ErrClosed and leaves no
// key, and Close waits for it: no key is still on a node when Close returns
// (a process that exits right after Close would leave it for the whole TTL).
func TestCloseDuringWriteBackLeavesNoKey(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	const name = "closeraise"
	ahead := time.Now().Add(10 * time.Second).UnixMicro()
	if err := rdbs[0].Set(bg, "dlock:{"+name+"}:fence", strconv.FormatInt(ahead, 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(rdbs[2])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	if _, err := c.TryAcquire(bg, name, dlock.WithTTL(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	raise := &slowRaise{d: 2 * time.Second}
	rdbs[1].AddHook(raise)
	rdbs[0].AddHook(&slowRelease{d: 300 * time.Millisecond})
	r, err := redlock.New(rdbs)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := r.TryAcquire(bg, name, dlock.WithTTL(10*time.Second))
		if l != nil {
			err = fmt.Errorf("got a lock: %v", l.Context().Err())
		}
		done <- err
	}()
	waitFor(t, "the write-back to start", func() bool { return raise.n.Load() > 0 })
	t0 := time.Now()
	if err := r.Close(bg); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v", time.Since(t0))
	atClose := exists(rdbs[:2], "dlock:{"+name+"}")
	err = <-done
	t.Logf("TryAcquire returned %v after Close began: %v", time.Since(t0), err)
	if !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryAcquire racing Close: %v, want ErrClosed", err)
	}
	if n := exists(rdbs[:2], "dlock:{"+name+"}"); n != 0 {
		t.Errorf("keys on %d nodes after TryAcquire returned", n)
	}
	if atClose != 0 {
		t.Errorf("Close returned while the acquisition's grant was still on %d node(s)", atClose)
	}
}

// TestCloseWithRetakesOnStoppedNode: node 2 stopped at the acquisition, so
// every renewal sends a re-take there that hangs; Close while they are out
// must return within the release timeout (1s here) and leave no goroutine (goleak in
// TestMain), and node 2, once back, must not hold the lock.
func TestCloseWithRetakesOnStoppedNode(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	r, err := redlock.New(rdbs, redlock.WithReleaseTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 900 * time.Millisecond
	srvs[2].Pause()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			srvs[2].Resume()
		}
	})
	if _, err := r.TryAcquire(bg, "closing", dlock.WithTTL(ttl)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // renewals and their re-takes of node 2 are out
	t0 := time.Now()
	err = r.Close(bg)
	t.Logf("Close took %v: %v", time.Since(t0).Round(time.Millisecond), err)
	if d := time.Since(t0); d > time.Second+300*time.Millisecond { // the release timeout, as documented
		t.Errorf("Close took %v", d)
	}
	srvs[2].Resume()
	resumed = true
	time.Sleep(300 * time.Millisecond)
	if n := exists(rdbs, "dlock:{closing}"); n != 0 {
		t.Errorf("lock left on %d nodes after Close", n)
	}
}

// redisDialer is go-redis' own background dial of a pool (a node that was
// down): the Redis client's goroutine, not the Redlock's, and gone when the
// client closes at the end of the test.
var redisDialer = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")
