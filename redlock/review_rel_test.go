package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/redlock"
)

// stallAfterNotOurs is a go-redis hook on one node: the first holder's
// release (release script, kind '0') of key that the node answers 0 ("not
// ours") stops the node (SIGSTOP) right after that answer, for d. The
// release's give-up, its second call to the node, then waits for the node:
// a node stopped between its two answers, as the node-pause nemesis does.
type stallAfterNotOurs struct {
	srv   *redistest.Server
	key   string
	d     time.Duration
	fired atomic.Int32
}

func (h *stallAfterNotOurs) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stallAfterNotOurs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		if err == nil && len(a) == 15 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[3]) == h.key &&
			fmt.Sprint(a[10]) == "0" {
			if c, ok := cmd.(*redis.Cmd); ok {
				if n, _ := c.Int64(); n == 0 && h.fired.Add(1) == 1 {
					h.srv.Pause()
					time.AfterFunc(h.d, h.srv.Resume)
				}
			}
		}
		return err
	}
}

func (h *stallAfterNotOurs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestNotOursWithinValidityIsNoLateLoss: the late-release annotation of
// b466f20 (then ErrLockLost, now ErrReleasedLate) was decided by when the verdict arrives, not by when the nodes said
// "not ours". Here the key is gone from two nodes of three well within the
// validity (a majority loss during the hold: restarts, or a bug), both
// answer the holder's release "not ours" within the validity, but one of
// them stops between that answer and the give-up that releaseNodes sends
// before reporting it, so the verdict lands after the validity. Release then
// said the validity ran out while it waited, and the torture
// worker's finalOf recorded Final "expired": the checker's "Release said not
// held, yet the lease was believed valid" no longer sees a loss that the
// nodes reported inside the validity.
func TestNotOursWithinValidityIsNoLateLoss(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	const ttl = 500 * time.Millisecond
	h := &stallAfterNotOurs{srv: srvs[2], key: "dlock:{gone}", d: 2 * ttl}
	rdbs[2].AddHook(h)
	t.Cleanup(srvs[2].Resume)
	r := newRedlock(t, rdbs, redlock.WithReleaseTimeout(3*time.Second))
	warmUp(t, r)

	l, acquired, left := lostOnTwo(t, r, probes, "gone", ttl)
	called := time.Since(acquired)
	err := l.Release(bg)
	t.Logf("Release called %v after the acquisition with %v of validity left, answered %v after the acquisition: %v",
		called.Round(time.Millisecond), left.Round(time.Millisecond), time.Since(acquired).Round(time.Millisecond), err)
	if h.fired.Load() != 1 {
		t.Fatalf("the stall fired %d times, want 1", h.fired.Load())
	}
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release: %v, want ErrNotHeld (gone on two nodes of three)", err)
	}
	if errors.Is(err, redlock.ErrReleasedLate) {
		t.Fatalf("Release: %v: both 'not ours' answers came %v or more before the validity ended, yet the error says the lease ran out while the release waited (finalOf then records the hold as expired)", err, left.Round(time.Millisecond))
	}
}

// slowFirstGiveUp is a go-redis hook that holds the first give-up (release
// script, kind '1') of key back for d before sending it: the loss's
// background give-up, slowed on the network, reaches the node after the
// holder's Release.
type slowFirstGiveUp struct {
	key   string
	d     time.Duration
	fired atomic.Int32
}

func (h *slowFirstGiveUp) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowFirstGiveUp) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) == 15 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[3]) == h.key &&
			fmt.Sprint(a[10]) == "1" && h.fired.Add(1) == 1 {
			time.Sleep(h.d)
		}
		return next(ctx, cmd)
	}
}

func (h *slowFirstGiveUp) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReleaseAfterTakeoverSaysLost: a lock that a Refresh found gone on a
// majority (context cause ErrLockLost, "gone or taken over") is released at
// once, within its validity. The afterLoss branch says "lost before the
// release" and wraps the cause (ErrLockLost) only when a quorum answered 1
// or 2, which the loss's own background give-ups (records '1') make the
// usual case. When those give-ups are slower than the Release, the nodes
// answer "not ours", and the n < quorum branch, checked first, answers with
// a plain "released on 1 of 3 nodes" and no ErrLockLost, since the validity
// has not run out: the real loss loses the ErrLockLost that b466f20 now
// gives a benign late verdict.
func TestReleaseAfterTakeoverSaysLost(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	_, probes := startNodesOn(t, rdbs)
	for _, rdb := range rdbs[1:] {
		rdb.AddHook(&slowFirstGiveUp{key: "dlock:{taken}", d: 300 * time.Millisecond})
	}
	r := newRedlock(t, rdbs)
	warmUp(t, r)
	l, err := r.TryAcquire(bg, "taken", dlock.WithTTL(5*time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	for _, p := range probes[1:] {
		if err := p.Del(bg, "dlock:{taken}").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Refresh(bg, 5*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh: %v, want ErrNotHeld", err)
	}
	cause := context.Cause(l.Context())
	if !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	err = l.Release(bg)
	t.Logf("cause %v; Release: %v", cause, err)
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release: %v, want ErrNotHeld", err)
	}
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Release after a loss: %v, want it to match ErrLockLost (lost before the release), as it does when the give-ups land first", err)
	}
}

// lostOnTwo acquires name on three nodes WithoutRenewal and deletes its key
// on nodes 1 and 2 (a majority loss, as after restarts), well within the
// validity; it returns the lock, when it was acquired and the validity left.
func lostOnTwo(t *testing.T, r *redlock.Redlock, probes []redis.UniversalClient, name string, ttl time.Duration) (dlock.Lock, time.Time, time.Duration) {
	t.Helper()
	l, err := r.TryAcquire(bg, name, dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	waitFor(t, "every node in the lock", func() bool { return !slices.Contains(asLock(t, l).Fences(), 0) })
	for _, p := range probes[1:] {
		if err := p.Del(bg, "dlock:{"+name+"}").Err(); err != nil {
			t.Fatal(err)
		}
	}
	left, err := l.TTL(bg)
	if err != nil || left < ttl/2 {
		t.Fatalf("validity left before Release: %v, %v; want well within it", left, err)
	}
	return l, acquired, left
}
