package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/observe"
)

// recorder keeps every event it is given.
type recorder struct {
	observe.BaseObserver
	mu       sync.Mutex
	acquires []observe.AcquireEvent
	renews   []observe.RenewEvent
	losses   []observe.LostEvent
	releases []observe.ReleaseEvent
}

func (r *recorder) OnAcquire(_ context.Context, e observe.AcquireEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acquires = append(r.acquires, e)
}
func (r *recorder) OnRenew(e observe.RenewEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renews = append(r.renews, e)
}
func (r *recorder) OnLost(e observe.LostEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.losses = append(r.losses, e)
}
func (r *recorder) OnRelease(_ context.Context, e observe.ReleaseEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases = append(r.releases, e)
}

func (r *recorder) acquireResults() []observe.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []observe.Result
	for _, e := range r.acquires {
		out = append(out, e.Result)
	}
	return out
}

func TestObserverEvents(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := setup(t, dlock.WithObserver(rec))
	l := mustAcquire(t, c, "obs", dlock.WithTTL(300*time.Millisecond))
	c.TryAcquire(bg, "obs")
	c.Acquire(bg, "obs", dlock.WithWait(50*time.Millisecond))
	ctx, cancel := context.WithCancel(bg)
	cancel()
	c.Acquire(ctx, "obs")
	c.TryAcquire(bg, "")
	want := observe.AcquireResults()
	if got := rec.acquireResults(); !slices.Equal(got, want) {
		t.Fatalf("acquire results %v, want %v", got, want)
	}
	if rec.acquires[0].Fence != l.Fence() || rec.acquires[0].Name != "obs" {
		t.Fatalf("acquired event %+v", rec.acquires[0])
	}

	waitFor(t, "a renewal", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.renews) > 0
	})
	rdb.HSet(bg, "dlock:{obs}", "token", "intruder")
	<-l.Context().Done()
	if err := l.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.losses) != 1 || rec.losses[0].Reason != observe.ReasonTakenOver || rec.losses[0].Held <= 0 {
		t.Fatalf("lost events %+v", rec.losses)
	}
	last := rec.renews[len(rec.renews)-1]
	if rec.renews[0].Result != observe.ResultOK || last.Result != observe.ResultLost {
		t.Fatalf("renew events %+v", rec.renews)
	}
	if len(rec.releases) != 1 || rec.releases[0].Result != observe.ResultNotHeld || !rec.releases[0].AfterLoss {
		t.Fatalf("release events %+v", rec.releases)
	}
	// The fence ties the events of one acquisition together.
	if last.Fence != l.Fence() || rec.losses[0].Fence != l.Fence() || rec.releases[0].Fence != l.Fence() {
		t.Fatalf("fences: renew %d, lost %d, release %d; the lock's is %d", last.Fence, rec.losses[0].Fence, rec.releases[0].Fence, l.Fence())
	}
}

func TestLoggerWarnsOnLossWithoutToken(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, rdb, _ := setup(t, dlock.WithLogger(logger))
	l := mustAcquire(t, c, "logged", dlock.WithTTL(300*time.Millisecond))
	rdb.Del(bg, "dlock:{logged}")
	<-l.Context().Done()
	_ = l.Release(bg)
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, fmt.Sprintf(`level=WARN msg="dlock lock lost" lock=logged fence=%d reason=taken_over`, l.Fence())) {
		t.Fatalf("no warning for the lost lock in:\n%s", out)
	}
	if strings.Contains(out, l.Token()) || strings.Contains(out, l.Token()[:8]) {
		t.Fatalf("token in the log:\n%s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// The log follows one lock's life by its name and fence: the acquisition,
// a renewal that failed, the loss at its hold limit, and the release after
// it, each a line with the same fence.
func TestLoggerFollowsALockByItsFence(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := redistest.Start(t)
	var failRenewal atomic.Bool
	fail := func(cmds []redis.Cmder) error {
		for _, c := range cmds {
			if isScript(c, scripts.Refresh) && failRenewal.CompareAndSwap(true, false) {
				return errors.New("injected: renewal failed")
			}
		}
		return nil
	}
	rdb := srv.Client(t)
	rdb.AddHook(&hook{before: func(c redis.Cmder) error { return fail([]redis.Cmder{c}) }, pipe: fail})
	loadScripts(t, rdb)
	rec := &recorder{}
	c := newLocker(t, rdb, dlock.WithLogger(logger), dlock.WithObserver(rec))
	failRenewal.Store(true)
	l := mustAcquire(t, c, "followed", dlock.WithTTL(300*time.Millisecond), dlock.WithMaxHold(time.Second))
	<-l.Context().Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrHoldLimit) {
		t.Fatalf("cause %v, want the hold limit", cause)
	}
	_ = l.Release(bg)
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	fence := fmt.Sprintf("fence=%d", l.Fence())
	for _, want := range []string{
		`level=DEBUG msg="dlock acquire" lock=followed result=acquired`,
		`level=WARN msg="dlock renewal failed" lock=followed ` + fence + ` result=error error="injected: renewal failed"`,
		`level=WARN msg="dlock lock lost" lock=followed ` + fence + ` reason=hold_limit`,
		`msg="dlock release" lock=followed ` + fence,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the log:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`msg="dlock acquire" lock=followed result=acquired wait=\S+ ` + fence + `\n`).MatchString(out) {
		t.Errorf("the acquisition's line has no %s:\n%s", fence, out)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.losses) != 1 || rec.losses[0].Reason != observe.ReasonHoldLimit || rec.losses[0].Fence != l.Fence() {
		t.Errorf("lost events %+v, want one at the hold limit with fence %d", rec.losses, l.Fence())
	}
}
