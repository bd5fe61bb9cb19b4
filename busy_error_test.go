package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// busyOf is the *NotObtainedError of a TryAcquire of name that must fail.
func busyOf(t *testing.T, c *dlock.Client, name string, opts ...dlock.AcquireOption) (*dlock.NotObtainedError, string) {
	t.Helper()
	l, err := c.TryAcquire(bg, name, opts...)
	if l != nil {
		_ = l.Release(bg)
		t.Fatalf("TryAcquire(%q) took a busy lock", name)
	}
	var e *dlock.NotObtainedError
	if !errors.As(err, &e) {
		t.Fatalf("TryAcquire(%q): %v, want a *NotObtainedError", name, err)
	}
	return e, err.Error()
}

func contains(t *testing.T, what, msg string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: %q does not say %q", what, msg, w)
		}
	}
}

// A busy error says who holds the name, in its fields and its text, as
// Redis answered the attempt: the exclusive holder's owner, readers, a
// semaphore's permits, a name kept for its min hold, the waiters in line,
// and a hint when the holder's owner is the caller's own.
func TestBusyErrorNamesTheHolder(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	holders := newLocker(t, rdb, dlock.WithDefaultOwner("billing-worker-7"))
	other := newLocker(t, rdb, dlock.WithDefaultOwner("someone-else"))

	t.Run("exclusive", func(t *testing.T) {
		h := mustAcquire(t, holders, "invoice", dlock.WithTTL(30*time.Second))
		defer func() { _ = h.Release(bg) }()
		done := make(chan error, 1)
		go func() {
			l, err := other.Acquire(bg, "invoice", dlock.WithWait(20*time.Second))
			if l != nil {
				_ = l.Release(bg)
			}
			done <- err
		}()
		waitFor(t, "a waiter in line", func() bool {
			info, err := other.Inspect(bg, "invoice")
			return err == nil && info.Waiters == 1
		})
		e, msg := busyOf(t, other, "invoice")
		if e.Kind != dlock.KindExclusive || e.Owner != "billing-worker-7" || e.Waiters != 1 || e.Self || e.HolderTTL <= 0 {
			t.Errorf("busy error fields: %+v", *e)
		}
		contains(t, "busy error", msg, `held by "billing-worker-7"`, "lease left", "1 in line")
		_ = h.Release(bg)
		if err := <-done; err != nil {
			t.Fatalf("the waiter: %v", err)
		}
	})

	t.Run("self", func(t *testing.T) {
		h := mustAcquire(t, holders, "mine")
		defer func() { _ = h.Release(bg) }()
		e, msg := busyOf(t, holders, "mine")
		if !e.Self || e.Owner != "billing-worker-7" {
			t.Errorf("busy error fields: %+v", *e)
		}
		contains(t, "busy error on a name the caller holds", msg, "this Client holds it", "not re-entrant")
	})

	// Another process with the same owner text (containers that share the
	// host's network and name, each its process 1) is not this Client: the
	// hint is for a lock the Client holds itself, by its fence.
	t.Run("same owner text, another client", func(t *testing.T) {
		twin := newLocker(t, rdb, dlock.WithDefaultOwner("billing-worker-7"))
		h := mustAcquire(t, holders, "twin")
		defer func() { _ = h.Release(bg) }()
		e, msg := busyOf(t, twin, "twin")
		if e.Self || e.Owner != "billing-worker-7" {
			t.Errorf("busy error fields: %+v", *e)
		}
		if strings.Contains(msg, "this Client holds it") {
			t.Errorf("busy error of another client's lock: %q gives the self hint", msg)
		}
	})

	t.Run("shared", func(t *testing.T) {
		for range 2 {
			r := mustAcquire(t, holders, "catalog", dlock.WithShared())
			defer func() { _ = r.Release(bg) }()
		}
		e, msg := busyOf(t, other, "catalog")
		if e.Kind != dlock.KindShared || e.Readers != 2 || e.Owner != "" || e.Self {
			t.Errorf("busy error fields: %+v", *e)
		}
		contains(t, "busy error of a read-held name", msg, "held by 2 readers", "shared")
	})

	t.Run("semaphore", func(t *testing.T) {
		for range 2 {
			p := mustAcquire(t, holders, "pool", dlock.WithPermits(2))
			defer func() { _ = p.Release(bg) }()
		}
		e, msg := busyOf(t, other, "pool", dlock.WithPermits(2))
		if e.Kind != dlock.KindSemaphore || e.Held != 2 || e.Permits != 2 || e.Self {
			t.Errorf("busy error fields: %+v", *e)
		}
		contains(t, "busy error of a full semaphore", msg, "all 2 of WithPermits(2) held")
	})

	t.Run("min hold", func(t *testing.T) {
		h := mustAcquire(t, holders, "report", dlock.WithMinHold(20*time.Second))
		if err := h.Release(bg); err != nil {
			t.Fatal(err)
		}
		e, msg := busyOf(t, other, "report")
		if e.Kind != dlock.KindExclusive || !e.MinHold || e.Owner != "billing-worker-7" {
			t.Errorf("busy error fields: %+v", *e)
		}
		contains(t, "busy error of a name kept for its min hold", msg, "kept for its min hold", `"billing-worker-7"`, "nothing renews it")
	})
}
