package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// outageSeen counts the commands whose final error (after go-redis' own
// retries) an outage made: a waiting Acquire that ends on the first such
// error had ended by the time the count is 1.
type outageSeen struct {
	match func(error) bool
	n     atomic.Int64
}

func (o *outageSeen) DialHook(next redis.DialHook) redis.DialHook { return next }

func (o *outageSeen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && o.match(err) {
			o.n.Add(1)
		}
		return err
	}
}

func (o *outageSeen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if e := c.Err(); e != nil && o.match(e) {
				o.n.Add(1)
				break
			}
		}
		return err
	}
}

// waitThroughOutage has a waiter wait for a held lock while outage makes
// Redis unable to serve, until seen has counted enough failed commands of
// the waiter that a wait ending on its first error would have ended; then
// heal ends the outage and the holder releases. The waiter must get the
// lock: its wait still had time.
func waitThroughOutage(t *testing.T, srv *redistest.Server, seen *outageSeen, outage, heal func()) {
	t.Helper()
	holderC := newClients(t, srv, 1)[0]
	waiterC := newClients(t, srv, 1, seen)[0]
	holder := mustAcquire(t, holderC, "outage", dlock.WithTTL(10*time.Second))
	got := make(chan error, 1)
	var waiter dlock.Lock
	start := time.Now()
	go func() {
		l, err := waiterC.Acquire(bg, "outage", dlock.WithTTL(2*time.Second), dlock.WithWait(20*time.Second))
		waiter = l
		got <- err
	}()
	waitFor(t, "the waiter in line", func() bool {
		info, err := holderC.Inspect(bg, "outage")
		return err == nil && info.Waiters == 1
	})
	outage()
	// Three of the waiter's commands failed after go-redis' retries: each
	// of them would have ended the wait before.
	waitFor(t, "the waiter's commands to fail in the outage", func() bool {
		select {
		case err := <-got:
			t.Fatalf("the wait ended during the outage, %v after it began, with 20s to wait: %v", time.Since(start).Round(time.Millisecond), err)
		default:
		}
		return seen.n.Load() >= 3
	})
	heal()
	// The holder's own release waits out what is left of the outage.
	if err := holder.Release(bg); err != nil {
		t.Fatalf("the holder's release after the outage: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter, whose wait had time left, did not get the lock: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter did not get the released lock within 15s")
	}
	if waiter.Fence() <= holder.Fence() {
		t.Fatalf("waiter's fence %d not above the holder's %d", waiter.Fence(), holder.Fence())
	}
	if err := waiter.Release(bg); err != nil {
		t.Fatal(err)
	}
}

// A primary demoted to a replica for longer than go-redis retries (writes
// answer READONLY) does not end a wait that still has time.
func TestWaitRidesOutReadOnlyPrimary(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	nowhere, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	seen := &outageSeen{match: func(err error) bool { return strings.Contains(err.Error(), "READONLY") }}
	waitThroughOutage(t, srv, seen,
		func() {
			// A replica of a primary that is not there keeps its data and
			// refuses writes.
			if err := admin.ReplicaOf(bg, "127.0.0.1", strconv.Itoa(nowhere)).Err(); err != nil {
				t.Fatal(err)
			}
		},
		func() {
			if err := admin.ReplicaOf(bg, "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}
		})
}

// A Redis that is down (connections refused) and comes back with its data
// does not end a wait that still has time; nor does its loading of that
// data (LOADING) on the way back.
func TestWaitRidesOutRestartWithData(t *testing.T) {
	// Every write on disk before its reply: the restarted server has the
	// lock and the queue as they were. A delay per key loaded keeps the
	// server LOADING for a while after it is back.
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always", "--dir", t.TempDir(), "--key-load-delay", "2000")
	seen := &outageSeen{match: func(err error) bool {
		return errors.Is(err, dlock.ErrUnavailable) || strings.Contains(err.Error(), "LOADING") ||
			strings.Contains(err.Error(), "connection refused")
	}}
	admin := srv.Client(t)
	// Some keys to load: with the delay, loading them takes about a
	// second.
	for i := range 500 {
		if err := admin.Set(bg, "filler:"+strconv.Itoa(i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitThroughOutage(t, srv, seen, srv.Kill, func() {
		if err := srv.Restart(bg); err != nil {
			t.Fatal(err)
		}
	})
}

// A wait that an outage outlasts ends when its time is up, with an error
// that says both: not obtained, and what Redis answered.
func TestWaitEndedInOutageSaysBoth(t *testing.T) {
	srv := redistest.Start(t)
	holderC := newClients(t, srv, 1)[0]
	waiterC := newClients(t, srv, 1)[0]
	mustAcquire(t, holderC, "outage", dlock.WithTTL(10*time.Second))
	admin := srv.Client(t)
	nowhere, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ReplicaOf(bg, "127.0.0.1", strconv.Itoa(nowhere)).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.ReplicaOf(bg, "NO", "ONE").Err() })
	start := time.Now()
	_, err = waiterC.Acquire(bg, "outage", dlock.WithTTL(2*time.Second), dlock.WithWait(1500*time.Millisecond))
	took := time.Since(start)
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Acquire = %v; want an error matching both ErrNotObtained and ErrUnavailable", err)
	}
	if took < 1500*time.Millisecond {
		t.Fatalf("the wait ended after %v, before its 1.5s", took)
	}
	for _, want := range []string{`"outage"`, "READONLY", "not obtained"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
}
