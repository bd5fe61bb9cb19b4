package redlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

func TestToleratesMinorityDown(t *testing.T) {
	srvs, rdbs := startNodes(t, 5)
	r := newRedlock(t, rdbs)
	srvs[4].Kill()
	l, err := r.TryAcquire(bg, "rl", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatalf("1 of 5 nodes down: %v", err)
	}
	m := asLock(t, l)
	granted := func() int {
		n := 0
		for _, f := range m.Fences() {
			if f > 0 {
				n++
			}
		}
		return n
	}
	// A quorum at once; the fourth live node joins when its answer comes.
	waitFor(t, "4 live nodes in the lock", func() bool { return granted() == 4 })
	if fences := m.Fences(); fences[4] != 0 || !slices.Contains(fences, m.Fence()) || m.Fence() <= 0 {
		// Fence is the largest fence of the quorum that granted first: a
		// later grant joins with its own, maybe larger, fence.
		t.Fatalf("fences %v, fence %d", fences, m.Fence())
	}
	time.Sleep(time.Second) // renewed on the live nodes past three TTLs
	if left, err := m.TTL(bg); err != nil || left <= 0 || m.Context().Err() != nil {
		t.Fatalf("renewed Redlock lock: %v, %v, %v", left, err, context.Cause(m.Context()))
	}
	if err := m.Release(bg); err != nil {
		t.Fatal(err)
	}
	// Release returns once a quorum (3 of 5) released; the fourth live node
	// is released in the background, well within the lock's TTL.
	waitFor(t, "every live node released", func() bool { return exists(rdbs[:4], "dlock:{rl}") == 0 })
	if err := m.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Release: %v", err)
	}
	if cause := context.Cause(m.Context()); !errors.Is(cause, dlock.ErrReleased) {
		t.Fatalf("cause %v", cause)
	}
	if _, err := m.TTL(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("TTL after Release: %v", err)
	}
}

// A single attempt (TryAcquire, Acquire with WithWait(0)) that failed nodes
// leave without a possible quorum answers at once, with ErrNoQuorum. (A
// wait rides such an outage out: wait_outage_test.go.)
func TestSingleAttemptFailsFastWithoutQuorum(t *testing.T) {
	srvs, rdbs := startNodes(t, 5)
	r := newRedlock(t, rdbs)
	for _, s := range srvs[:3] {
		s.Kill()
	}
	for _, try := range []struct {
		name string
		call func() (dlock.Lock, error)
	}{
		{"TryAcquire", func() (dlock.Lock, error) { return r.TryAcquire(bg, "rl") }},
		{"WithWait(0)", func() (dlock.Lock, error) { return r.Acquire(bg, "rl", dlock.WithWait(0)) }},
	} {
		start := time.Now()
		l, err := try.call()
		if !errors.Is(err, redlock.ErrNoQuorum) || l != nil {
			t.Fatalf("%s, 3 of 5 down: %v, %v; want ErrNoQuorum and no lock", try.name, l, err)
		}
		var derr *dlock.Error
		if !errors.As(err, &derr) || derr.Op != "acquire" || derr.Name != "rl" {
			t.Fatalf("%s: error %#v, want a *dlock.Error of op acquire on rl", try.name, err)
		}
		if !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("%s: nodes refusing connections: %v does not match ErrUnavailable", try.name, err)
		}
		if errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("%s: %v matches ErrNotObtained: nobody was seen holding the lock", try.name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%s took %v to see that no quorum is possible", try.name, d)
		}
		// Grants that came before the verdict are given back before the
		// call returns, later ones in the background.
		waitFor(t, "the live nodes to give back the failed acquisition's grants", func() bool {
			return exists(rdbs[3:], "dlock:{rl}") == 0
		})
	}
}

func TestNodeRestartedEmpty(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	l, err := r.TryAcquire(bg, "rl", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a := asLock(t, l)
	waitFor(t, "all 3 nodes in the lock", func() bool { return !slices.Contains(a.Fences(), 0) })
	if err := srvs[0].Restart(bg); err != nil {
		t.Fatal(err)
	}
	other := newRedlock(t, rdbs)
	if _, err := other.TryAcquire(bg, "rl"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("second holder while the quorum holds: %v", err)
	}
	// The attempt on the restarted node may answer after the verdict: its
	// grant is then given back in the background.
	waitFor(t, "the failed attempt's lock on the restarted node to be released", func() bool {
		return rdbs[0].Exists(bg, "dlock:{rl}").Val() == 0
	})
	if err := a.Release(bg); err != nil {
		t.Fatalf("first holder's release (2 of 3 nodes): %v", err)
	}
}

// TestRefusesMaxHoldAndReplicas: a Lock has no hold limit, and WAIT on
// independent primaries means nothing; both are refused instead of being
// accepted and ignored.
func TestRefusesMaxHoldAndReplicas(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	for _, tc := range []struct {
		name string
		opt  dlock.AcquireOption
	}{
		{"WithMaxHold", dlock.WithMaxHold(400 * time.Millisecond)},
		{"WithMinHold", dlock.WithMinHold(400 * time.Millisecond)},
		{"WithReplicas", dlock.WithReplicas(1, 100*time.Millisecond)},
		{"Permits", dlock.WithPermits(2)},
		{"WithDurableGrant", dlock.WithDurableGrant(100 * time.Millisecond)},
		{"WithDurableGrant negative", dlock.WithDurableGrant(-time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, acquire := range []func(context.Context, string, ...dlock.AcquireOption) (dlock.Lock, error){r.Acquire, r.TryAcquire} {
				l, err := acquire(bg, "rlopt", dlock.WithTTL(300*time.Millisecond), tc.opt)
				if err == nil {
					_ = l.Release(bg)
					t.Fatalf("Redlock accepted %s, which it cannot keep", tc.name)
				}
				if !errors.Is(err, dlock.ErrInvalidOption) || l != nil {
					t.Fatalf("%s: %v, %v; want ErrInvalidOption and no lock", tc.name, l, err)
				}
			}
			if n := exists(rdbs, "dlock:{rlopt}"); n != 0 {
				t.Fatalf("a refused acquisition wrote to %d nodes", n)
			}
		})
	}
}

// TestKeysAreTheCores: a Redlock's lock is the core's lock on each node, so
// a dlock.Client on one node sees it busy, and the prefix option applies.
func TestKeysAreTheCores(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs, redlock.WithPrefix("app:"), redlock.WithDefaultOwner("redlock-test"))
	l, err := r.TryAcquire(bg, "shared")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	waitFor(t, "all nodes in the lock", func() bool { return exists(rdbs, "app:{shared}") == 3 })
	for i, rdb := range rdbs {
		h := rdb.HGetAll(bg, "app:{shared}").Val()
		if h["token"] != l.Token() || h["owner"] != "redlock-test" || h["fence"] == "" {
			t.Fatalf("node %d holds %v", i, h)
		}
	}
	c, err := dlock.New(rdbs[0], dlock.WithPrefix("app:"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	if _, err := c.TryAcquire(bg, "shared"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a Client on node 0 while the Redlock holds the lock: %v", err)
	}
}

// dlock.WithOwner's text replaces the Redlock's owner on every node,
// for that acquisition only.
func TestAcquireOwner(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs, redlock.WithDefaultOwner("redlock-test"))
	l, err := r.TryAcquire(bg, "owned", dlock.WithOwner("candidate-7"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	waitFor(t, "all nodes in the lock", func() bool { return exists(rdbs, "dlock:{owned}") == 3 })
	for i, rdb := range rdbs {
		if h := rdb.HGetAll(bg, "dlock:{owned}").Val(); h["owner"] != "candidate-7" {
			t.Fatalf("node %d holds %v", i, h)
		}
	}
}

// A name the nodes hold as a semaphore (Clients on them took WithPermits)
// is refused at once with dlock.ErrMismatch, as the Client refuses it: no
// wait cures another kind of lock, and the permits' holders are not the
// Redlock's busy holder.
func TestSemaphoreOnTheNodesIsAMismatch(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	holdOnNodes(t, rdbs, "pool", 2, 2, 2)
	r := newRedlock(t, rdbs)
	if _, err := r.TryAcquire(bg, "pool"); !errors.Is(err, dlock.ErrMismatch) || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryAcquire of a name held as a semaphore: %v; want ErrMismatch, not busy", err)
	}
	start := time.Now()
	_, err := r.Acquire(bg, "pool", dlock.WithWait(20*time.Second))
	if !errors.Is(err, dlock.ErrMismatch) {
		t.Fatalf("Acquire of a name held as a semaphore: %v; want ErrMismatch", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("Acquire waited %v for a mismatch no wait cures", waited)
	}
}

// slowScripts holds every script reply of a node for d: its answers come
// after the other nodes' have decided the attempt.
type slowScripts struct{ d time.Duration }

func (h slowScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			time.Sleep(h.d)
		}
		return err
	}
}
func (h slowScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		time.Sleep(h.d)
		return err
	}
}

// A semaphore refusal counts whichever replies decide the attempt: with
// one node busy and one a semaphore heard first (the third, a semaphore
// too, slow), the attempt is a mismatch, not a busy lock that the wait
// would wait out to its limit.
func TestSemaphoreMismatchHeardBesideBusy(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	holdOnNodes(t, rdbs, "pool", 0, 2, 2)
	rdbs[2].AddHook(slowScripts{d: 100 * time.Millisecond})
	r := newRedlock(t, rdbs)
	_, err := r.Acquire(bg, "pool", dlock.WithWait(20*time.Second))
	if !errors.Is(err, dlock.ErrMismatch) || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Acquire with node 0 busy and nodes 1, 2 semaphores: %v; want ErrMismatch", err)
	}
}

// holdOnNodes takes name on each node with a dlock Client of its own, for
// the test's length: exclusively where permits[i] is 0, else one of
// permits[i] permits.
func holdOnNodes(t *testing.T, rdbs []redis.UniversalClient, name string, permits ...int) {
	t.Helper()
	for i, rdb := range rdbs {
		c, err := dlock.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(bg) })
		opts := []dlock.AcquireOption{dlock.WithTTL(time.Minute)}
		if permits[i] > 0 {
			opts = append(opts, dlock.WithPermits(permits[i]))
		}
		if _, err := c.TryAcquire(bg, name, opts...); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
}
