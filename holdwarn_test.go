package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/observe"
)

// holdRecorder keeps the hold warnings and releases it is given.
type holdRecorder struct {
	observe.BaseObserver
	mu       sync.Mutex
	warnings []observe.HoldWarningEvent
	releases []observe.ReleaseEvent
}

func (r *holdRecorder) OnHoldWarning(e observe.HoldWarningEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings = append(r.warnings, e)
}

func (r *holdRecorder) OnRelease(_ context.Context, e observe.ReleaseEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases = append(r.releases, e)
}

func (r *holdRecorder) seen() ([]observe.HoldWarningEvent, []observe.ReleaseEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]observe.HoldWarningEvent(nil), r.warnings...), append([]observe.ReleaseEvent(nil), r.releases...)
}

// A hold past its warning threshold is reported once, while it runs (by the
// renewal that follows the threshold), with a Warn log; holds within it
// are not.
func TestHoldWarning(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	rec := &holdRecorder{}
	c, _, _ := setup(t, dlock.WithObserver(rec), dlock.WithLogger(logger))
	const ttl, warn = 300 * time.Millisecond, 400 * time.Millisecond

	short := mustAcquire(t, c, "hold:short", dlock.WithTTL(ttl), dlock.WithHoldWarning(warn))
	if err := short.Release(bg); err != nil {
		t.Fatal(err)
	}

	l := mustAcquire(t, c, "hold:long", dlock.WithTTL(ttl), dlock.WithHoldWarning(warn))
	waitFor(t, "a hold warning while the lock is held", func() bool {
		w, _ := rec.seen()
		return len(w) > 0
	})
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	warnings, releases := rec.seen()
	if len(warnings) != 1 {
		t.Fatalf("hold warnings %+v, want exactly one (for hold:long)", warnings)
	}
	w := warnings[0]
	if w.Name != "hold:long" || w.Fence != l.Fence() || w.Threshold != warn || w.TTL != ttl || w.Held < warn {
		t.Fatalf("hold warning %+v: want hold:long, fence %d, threshold %v, TTL %v, held >= threshold", w, l.Fence(), warn, ttl)
	}
	for _, r := range releases {
		if r.TTL != ttl {
			t.Fatalf("release event %+v: TTL %v, want %v (for the hold-to-TTL ratio)", r, r.TTL, ttl)
		}
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, `level=WARN msg="dlock lock held past its warning threshold" lock=hold:long`) {
		t.Fatalf("no Warn log for the long hold in:\n%s", out)
	}
	if strings.Contains(out, "hold:short") {
		t.Fatalf("a hold within its threshold was logged:\n%s", out)
	}
}

// A lock that is not renewed is reported at its release at the latest: no
// renewal runs past the threshold to notice it earlier.
func TestHoldWarningAtRelease(t *testing.T) {
	rec := &holdRecorder{}
	c, _, _ := setup(t, dlock.WithObserver(rec))
	l := mustAcquire(t, c, "hold:fixed", dlock.WithTTL(time.Second), dlock.WithoutRenewal(),
		dlock.WithHoldWarning(50*time.Millisecond))
	time.Sleep(100 * time.Millisecond)
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	warnings, _ := rec.seen()
	if len(warnings) != 1 || warnings[0].Held < 50*time.Millisecond {
		t.Fatalf("hold warnings %+v, want one at the release", warnings)
	}
}

// The default threshold is a multiple of the TTL; WithHoldWarning(0) turns
// warnings off; a negative threshold is refused.
func TestHoldWarningBounds(t *testing.T) {
	rec := &holdRecorder{}
	c, _, _ := setup(t, dlock.WithObserver(rec))
	off := mustAcquire(t, c, "hold:off", dlock.WithTTL(30*time.Millisecond), dlock.WithoutRenewal(),
		dlock.WithHoldWarning(0))
	def := mustAcquire(t, c, "hold:default", dlock.WithTTL(time.Second), dlock.WithoutRenewal())
	time.Sleep(40 * time.Millisecond)
	_ = off.Release(bg)
	_ = def.Release(bg)
	if w, _ := rec.seen(); len(w) != 0 {
		t.Fatalf("hold warnings %+v, want none (off; within %d TTLs)", w, dlock.DefaultHoldWarningTTLs)
	}
	_, err := c.TryAcquire(bg, "hold:bad", dlock.WithHoldWarning(-time.Second))
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "-1s") {
		t.Fatalf("negative hold warning: %v, want ErrInvalidOption naming it", err)
	}
}

// A lock that was lost is not warned about at its release, however late:
// it was held until the loss.
func TestHoldWarningNotAfterLoss(t *testing.T) {
	rec := &holdRecorder{}
	c, _, _ := setup(t, dlock.WithObserver(rec))
	l := mustAcquire(t, c, "hold:lost", dlock.WithoutRenewal(), dlock.WithTTL(150*time.Millisecond),
		dlock.WithHoldWarning(400*time.Millisecond))
	<-l.Context().Done()
	time.Sleep(400 * time.Millisecond)
	if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("release of a lost lock: %v, want ErrNotHeld", err)
	}
	if w, _ := rec.seen(); len(w) != 0 {
		t.Fatalf("hold warnings %+v for a lock lost before its threshold", w)
	}
}
