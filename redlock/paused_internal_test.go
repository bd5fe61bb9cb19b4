package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestContextOfValidityOverIsEndedAtOnce: a holder that asks for the
// lock's context after its validity ran out (its process stopped right after
// Acquire returned, and the deadline timer has not fired yet) must find it
// ended, not alive until the timer fires. The validity is moved into the
// past here, the timer left where it was: the state the holder
// wakes up to when the scheduler runs it first.
func TestContextOfValidityOverIsEndedAtOnce(t *testing.T) {
	srvs := redistest.StartPrimaries(t, 3)
	rdbs := make([]redis.UniversalClient, len(srvs))
	for i, s := range srvs {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		rdbs[i] = rdb
	}
	r, err := New(rdbs)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	l, err := r.TryAcquire(context.Background(), "paused", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m := l.(*Lock)
	m.mu.Lock()
	m.valid = time.Now().Add(-time.Millisecond)
	m.mu.Unlock()
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("context asked for past the validity: cause %v, want ErrLockLost", cause)
	}
}
