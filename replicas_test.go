package dlock_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestWithReplicas(t *testing.T) {
	c, rdb, primary := setup(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	waitFor(t, "replica in sync", func() bool {
		info := replica.Client(t).Info(bg, "replication").Val()
		return strings.Contains(info, "master_link_status:up")
	})

	l, err := c.Acquire(bg, "rep", dlock.WithReplicas(1, time.Second))
	if err != nil {
		t.Fatalf("with one replica in sync: %v", err)
	}
	if got := replica.Client(t).HGet(bg, "dlock:{rep}", "token").Val(); got != l.Token() {
		t.Fatalf("replica has token %q right after the acknowledged acquire", got)
	}
	// A lock handed over by a release is confirmed the same way.
	got := make(chan error, 1)
	go func() {
		w, err := newLocker(t, rdb).Acquire(bg, "rep", dlock.WithReplicas(1, time.Second), dlock.WithWait(5*time.Second))
		if err == nil && replica.Client(t).HGet(bg, "dlock:{rep}", "token").Val() != w.Token() {
			err = errors.New("replica lacks the handed-over lock")
		}
		got <- err
	}()
	waitFor(t, "waiter queued", func() bool { return rdb.ZCard(bg, "dlock:{rep}:q").Val() == 1 })
	_ = l.Release(bg)
	if err := <-got; err != nil {
		t.Fatalf("hand-off with WithReplicas: %v", err)
	}

	// Asking for two when there is one: too few acknowledgements, released.
	_, err = c.Acquire(bg, "rep2", dlock.WithReplicas(2, 100*time.Millisecond))
	var rerr *dlock.ReplicaError
	if !errors.Is(err, dlock.ErrNotReplicated) || !errors.As(err, &rerr) || rerr.Acked != 1 || rerr.Want != 2 {
		t.Fatalf("two replicas wanted, one there: %v", err)
	}
	if rdb.Exists(bg, "dlock:{rep2}").Val() != 0 {
		t.Fatal("unconfirmed lock left in Redis")
	}

	// A replica that stops answering: no acknowledgement in time.
	replica.Pause()
	defer replica.Resume()
	_, err = c.Acquire(bg, "rep3", dlock.WithReplicas(1, 200*time.Millisecond))
	if !errors.Is(err, dlock.ErrNotReplicated) {
		t.Fatalf("paused replica: %v", err)
	}
	if rdb.Exists(bg, "dlock:{rep3}").Val() != 0 {
		t.Fatal("unconfirmed lock left in Redis")
	}

	if _, err := c.Acquire(bg, "rep4", dlock.WithReplicas(1, 0)); err == nil || errors.Is(err, dlock.ErrNotReplicated) {
		t.Fatalf("WithReplicas without a timeout: %v, want a usage error", err)
	}
}
