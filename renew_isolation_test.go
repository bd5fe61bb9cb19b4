package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/observe"
)

// renewTally counts each lock's background renewals by result.
type renewTally struct {
	observe.BaseObserver
	mu  sync.Mutex
	got map[string]map[observe.Result]int
}

func (r *renewTally) OnRenew(e observe.RenewEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string]map[observe.Result]int{}
	}
	if r.got[e.Name] == nil {
		r.got[e.Name] = map[observe.Result]int{}
	}
	r.got[e.Name][e.Result]++
}

func (r *renewTally) count(name string, res observe.Result) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[name][res]
}

// TestBadKeyFailsOnlyItsOwnRenewal: locks due together are renewed in one
// pipeline, and a lock whose key someone overwrote with another type, or
// whose hash another token took over, costs only itself: the locks renewed
// with it are answered as if they had gone alone, never with its error. (A
// script renewing many locks in one call, which this would catch if it let
// one key's error fail the others, was tried and left out: see the
// Renewal section of docs/design.md.)
func TestBadKeyFailsOnlyItsOwnRenewal(t *testing.T) {
	rec := &renewTally{}
	c, rdb, _ := setup(t, dlock.WithObserver(rec))
	const ttl = 900 * time.Millisecond
	// Taken back to back: due within the renewer's batch slack of each
	// other, so their first renewals leave together.
	var locks []dlock.Lock
	for i := range 6 {
		locks = append(locks, mustAcquire(t, c, "batch-"+strconv.Itoa(i), dlock.WithTTL(ttl)))
	}
	wrong, taken := locks[1], locks[4]
	if err := rdb.Del(bg, "dlock:{"+wrong.Name()+"}").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(bg, "dlock:{"+wrong.Name()+"}", "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(bg, "dlock:{"+taken.Name()+"}", "token", "someone-else").Err(); err != nil {
		t.Fatal(err)
	}

	// The taken lock is lost at its first renewal; the wrong-typed one's
	// renewals fail until its deadline ends it.
	for _, l := range []dlock.Lock{wrong, taken} {
		select {
		case <-l.Context().Done():
		case <-time.After(10 * ttl):
			t.Fatalf("%s still held after its key was overwritten", l.Name())
		}
	}
	if cause := context.Cause(taken.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("%s: cause %v, want ErrLockLost", taken.Name(), cause)
	}
	if n := rec.count(wrong.Name(), observe.ResultError); n == 0 {
		t.Fatalf("%s: no renewal answered with an error although its key holds a string", wrong.Name())
	}
	// The others keep renewing, long after: each renewed at least four
	// times, never with an error nor a loss.
	waitFor(t, "the healthy locks' renewals", func() bool {
		for i, l := range locks {
			if i != 1 && i != 4 && rec.count(l.Name(), observe.ResultOK) < 4 {
				return false
			}
		}
		return true
	})
	for i, l := range locks {
		if i == 1 || i == 4 {
			continue
		}
		if err := l.Context().Err(); err != nil {
			t.Fatalf("%s ended beside a bad key: %v", l.Name(), context.Cause(l.Context()))
		}
		if n := rec.count(l.Name(), observe.ResultError) + rec.count(l.Name(), observe.ResultLost); n != 0 {
			t.Fatalf("%s: %d renewals failed, answered with another lock's error", l.Name(), n)
		}
		if got := rdb.HGet(bg, "dlock:{"+l.Name()+"}", "token").Val(); got != l.Token() {
			t.Fatalf("%s: Redis holds token %q, want ours", l.Name(), got)
		}
		if err := l.Release(bg); err != nil {
			t.Fatalf("%s: %v", l.Name(), err)
		}
	}
	if got := rdb.Get(bg, "dlock:{"+wrong.Name()+"}").Val(); got != "not a lock" {
		t.Fatalf("the overwritten key was changed by the renewals: %q", got)
	}
}
