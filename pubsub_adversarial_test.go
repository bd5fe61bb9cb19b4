package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Close while the session reader repairs a hung connection (its PING went
// unanswered; the new connection's dial and SUBSCRIBE hang too): Close ends
// the repair and returns, and no session reader outlives it.
func TestCloseDuringPubSubRepair(t *testing.T) {
	srv := redistest.Start(t)
	rdb, proxy := proxied(t, srv, redis.Options{})
	w, err := dlock.New(rdb, dlock.WithReleaseTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = w.Close(bg)
		}
	})
	other := newLocker(t, srv.Client(t))
	direct := srv.Client(t)
	h := mustAcquire(t, other, "repair", dlock.WithTTL(20*time.Second))
	defer func() { _ = h.Release(bg) }()
	res := acquireAsync(w, "repair", dlock.WithWait(30*time.Second), dlock.WithTTL(20*time.Second))
	waitFor(t, "W queued", func() bool { return direct.ZCard(bg, "dlock:{repair}:q").Val() == 1 })
	waitFor(t, "W's session reader", func() bool { return pubsubReaders() == 1 })

	proxy.Blackhole()
	// 1 s of silence, a PING, 2 s without its answer: the reader replaces the
	// connection then; the replacement hangs in the blackhole.
	time.Sleep(3500 * time.Millisecond)
	start := time.Now()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	cerr := w.Close(ctx)
	closed = true
	took := time.Since(start)
	t.Logf("Close: %v after %v", cerr, took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("Close took %v during a pub/sub repair", took.Round(time.Millisecond))
	}
	// Close returns once the reader called wg.Done, its last deferred call;
	// the goroutine may still be in read's frame for a moment after (seen
	// in 3 of 10 runs under -race). A reader still repairing would be there
	// for seconds: 1 s tells the two apart.
	gone := time.Now().Add(time.Second)
	for pubsubReaders() != 0 && time.Now().Before(gone) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := pubsubReaders(); n != 0 {
		t.Errorf("%d session readers left 1 s after Close", n)
	}
	select {
	case r := <-res:
		t.Logf("W's wait: %v", r.err)
	case <-time.After(5 * time.Second):
		t.Error("W's wait did not end with Close")
	}
	proxy.Pass()
	_ = context.Canceled
}
