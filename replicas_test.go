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

// startReplica starts a replica of primary and waits until it is in sync.
func startReplica(t *testing.T, primary *redistest.Server) *redistest.Server {
	t.Helper()
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	waitFor(t, "replica in sync", func() bool {
		info := replica.Client(t).Info(bg, "replication").Val()
		return strings.Contains(info, "master_link_status:up")
	})
	return replica
}

func TestWithReplicas(t *testing.T) {
	c, rdb, primary := setup(t)
	replica := startReplica(t, primary)

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
	// (A single attempt: a waiting Acquire tries again until its wait ends,
	// TestWaitRidesOutTooFewReplicas.)
	_, err = c.TryAcquire(bg, "rep2", dlock.WithReplicas(2, 100*time.Millisecond))
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
	_, err = c.TryAcquire(bg, "rep3", dlock.WithReplicas(1, 200*time.Millisecond))
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

// A waiting Acquire whose grants too few replicas acknowledge (a replica
// missing, or resyncing after a failover) rides it out as an outage: each
// short grant is released, and a later attempt, with a fresh token, gets
// the lock once enough replicas answer. When the wait runs out first, the
// error matches both ErrNotObtained and ErrNotReplicated and says why.
func TestWaitRidesOutTooFewReplicas(t *testing.T) {
	c, rdb, primary := setup(t)
	inSync := func(r *redistest.Server) func() bool {
		return func() bool {
			return strings.Contains(r.Client(t).Info(bg, "replication").Val(), "master_link_status:up")
		}
	}
	first := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	waitFor(t, "the first replica in sync", inSync(first))
	waits := func() int64 {
		info := rdb.Info(bg, "commandstats").Val()
		_, rest, ok := strings.Cut(info, "cmdstat_wait:calls=")
		if !ok {
			return 0
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		return n
	}

	// Two replicas asked for, one there, until a second one joins. (With
	// the scripts loaded, each attempt sends one WAIT.)
	loadScripts(t, rdb)
	before := waits()
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(bg, "rep-wait", dlock.WithReplicas(2, 150*time.Millisecond), dlock.WithWait(15*time.Second))
		if err == nil {
			err = l.Release(bg)
		}
		got <- err
	}()
	waitFor(t, "two attempts short of replicas", func() bool {
		select {
		case err := <-got:
			t.Fatalf("the wait ended after %d attempts, with 14 s left: %v", waits()-before, err)
		default:
		}
		return waits()-before >= 2
	})
	second := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	waitFor(t, "the second replica in sync", inSync(second))
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("after the second replica joined: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no lock 15 s after the second replica joined")
	}
	if n := rdb.Exists(bg, "dlock:{rep-wait}").Val(); n != 0 {
		t.Fatal("lock left after its release")
	}

	// Short of replicas until the wait ends: both errors, and why.
	start := time.Now()
	_, err := c.Acquire(bg, "rep-ask-three", dlock.WithReplicas(3, 100*time.Millisecond), dlock.WithWait(time.Second))
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrNotReplicated) ||
		!strings.Contains(err.Error(), "2 of 3 replicas") || !strings.Contains(err.Error(), "rep-ask-three") {
		t.Fatalf("wait short of replicas to its end: %v", err)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("the wait ended after %v of its 1s", took)
	}
	// The last attempt may have been cut by the wait's end with its grant
	// in Redis: given back in the background.
	waitFor(t, "no unconfirmed lock left in Redis", func() bool { return rdb.Exists(bg, "dlock:{rep-ask-three}").Val() == 0 })
}

// WithReentry keeps WithReplicas: a nested acquisition asking for more
// replicas than confirmed the held lock's grant gets no handle on it
// (ErrReentrant), one asking for as many or fewer does, and the held lock
// is untouched by the refusal.
func TestReentryKeepsReplicaCount(t *testing.T) {
	c, rdb, primary := setup(t)
	startReplica(t, primary)
	plain, err := c.TryAcquire(bg, "rep-plain", dlock.WithReentry())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(plain.Context(), "rep-plain", dlock.WithReentry(), dlock.WithReplicas(1, time.Second))
	if !errors.Is(err, dlock.ErrReentrant) || !strings.Contains(err.Error(), "without WithReplicas") {
		t.Fatalf("nested WithReplicas(1) on a lock taken without it: %v, want ErrReentrant saying why", err)
	}
	if err := plain.Release(bg); err != nil {
		t.Fatalf("the held lock after the refused re-entry: %v", err)
	}

	one, err := c.TryAcquire(bg, "rep-one", dlock.WithReentry(), dlock.WithReplicas(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	nested, err := c.TryAcquire(one.Context(), "rep-one", dlock.WithReentry(), dlock.WithReplicas(1, time.Second))
	if err != nil {
		t.Fatalf("nested WithReplicas(1) on a lock confirmed by 1: %v", err)
	}
	_, err = c.TryAcquire(one.Context(), "rep-one", dlock.WithReentry(), dlock.WithReplicas(2, time.Second))
	if !errors.Is(err, dlock.ErrReentrant) || !strings.Contains(err.Error(), "confirmed by 1 replicas, and this acquisition asks for 2") {
		t.Fatalf("nested WithReplicas(2) on a lock confirmed by 1: %v, want ErrReentrant naming both counts", err)
	}
	if err := nested.Release(bg); err != nil {
		t.Fatal(err)
	}
	if got := rdb.HGet(bg, "dlock:{rep-one}", "token").Val(); got != one.Token() || one.Context().Err() != nil {
		t.Fatalf("held lock after the nested handles: token %q, context %v", got, one.Context().Err())
	}
	if err := one.Release(bg); err != nil {
		t.Fatal(err)
	}
}
