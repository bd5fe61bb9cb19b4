package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// A Release that ran in Redis while the lock was ours, but whose reply was
// lost, is no loss: the lock ends released (its context's cause is
// ErrReleased), no OnLost is reported, and the caller's Release tried again
// reports success, as the record of the first release in Redis says.
func TestReleaseWhoseReplyWasLostIsNoLoss(t *testing.T) {
	for _, retry := range []struct {
		name   string
		before func(t *testing.T, l dlock.Lock) // what happens before the caller tries again
	}{
		// The caller tries again at once.
		{"retried at once", func(*testing.T, dlock.Lock) {}},
		// The caller tries again after the lease would have ended.
		{"retried after the lease", func(t *testing.T, l dlock.Lock) {
			select {
			case <-l.Context().Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the lock's context did not end within 5s of a 1s lease")
			}
		}},
	} {
		t.Run(retry.name, func(t *testing.T) {
			srv := redistest.Start(t)
			loadScripts(t, srv.Client(t)) // EVALSHA from the first call: what the hook matches
			rec := &recorder{}
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
			// The first release runs in Redis, and its reply is lost.
			rdb.AddHook(&replyFault{match: func(cmd redis.Cmder) bool { return isScript(cmd, scripts.Release) }, mode: "run+lose", times: 1})
			t.Cleanup(func() { _ = rdb.Close() })
			c := newLocker(t, rdb, dlock.WithObserver(rec))
			acquired := time.Now()
			l, err := c.Acquire(bg, "released", dlock.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(bg); err == nil {
				t.Fatal("Release reported success though its reply was lost")
			}
			retry.before(t, l)
			if err := l.Release(bg); err != nil {
				t.Fatalf("Release tried again: %v; want success, the first release ran", err)
			}
			select {
			case <-l.Context().Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the lock's context did not end after its release")
			}
			if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrReleased) {
				t.Errorf("the lock's context ended with %v; want ErrReleased", cause)
			}
			// Past the lease deadline, when a loss would be reported: in
			// the good case no event comes at all, so the clock is the
			// condition.
			waitFor(t, "the lease deadline to pass", func() bool { return time.Since(acquired) > 1500*time.Millisecond })
			rec.mu.Lock()
			losses := len(rec.losses)
			rec.mu.Unlock()
			if losses != 0 {
				t.Errorf("%d OnLost for a lock released fine", losses)
			}
			// Nothing was left held: another client takes it at once.
			other := newLocker(t, srv.Client(t))
			if o, err := other.TryAcquire(bg, "released"); err != nil {
				t.Fatalf("after the release: %v", err)
			} else {
				_ = o.Release(bg)
			}
		})
	}
}
