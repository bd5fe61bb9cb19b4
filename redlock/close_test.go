package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

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

// redisDialer is go-redis' own background dial of a pool (a node that was
// down): the Redis client's goroutine, not the Redlock's, and gone when the
// client closes at the end of the test.
var redisDialer = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")
