package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// checkReplicaWait lets through any wait below the read timeout, but Redis
// answers an unacknowledged WAIT only when it sees its timeout pass, which
// it checks between event loop rounds (up to 1000/hz ms apart when idle),
// and after the script and the round trip. A wait accepted by the check
// must end in Redis' own answer (ErrNotReplicated), not in an i/o timeout
// and go-redis' re-sends, which is what the check exists to prevent.
func TestReviewAcceptedReplicaWaitEndsInRedisAnswer(t *testing.T) {
	primary, replica := startReplicated(t)
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newLocker(t, rdb)

	replica.Pause()
	defer replica.Resume()
	// Too close to the read timeout: refused before anything is sent.
	for _, wait := range []time.Duration{999 * time.Millisecond, 950 * time.Millisecond} {
		if _, err := c.Acquire(bg, "rt2", dlock.WithReplicas(1, wait)); !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("WithReplicas(1, %v) under a 1s read timeout: %v; want it refused (ErrInvalidOption)", wait, err)
		}
	}
	// Accepted: it must end in Redis' own answer.
	wait := 800 * time.Millisecond
	for i := range 3 {
		start := time.Now()
		_, err := c.Acquire(bg, "rt2", dlock.WithReplicas(1, wait), dlock.WithTTL(10*time.Second))
		if !errors.Is(err, dlock.ErrNotReplicated) {
			t.Errorf("WithReplicas(1, %v) under a 1s read timeout, try %d: %v after %v; want ErrNotReplicated",
				wait, i, err, time.Since(start).Round(time.Millisecond))
		}
	}
}
