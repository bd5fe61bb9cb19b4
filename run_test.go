package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// stubLock is a dlock.Lock that only records its release: Run must work on
// any Lock, and a crash of the child process below must not need Redis.
type stubLock struct {
	ctx      context.Context
	released chan struct{}
}

func (s *stubLock) Name() string                                 { return "stub" }
func (s *stubLock) Token() string                                { return "t" }
func (s *stubLock) Fence() int64                                 { return 1 }
func (s *stubLock) Context() context.Context                     { return s.ctx }
func (s *stubLock) TTL(context.Context) (time.Duration, error)   { return time.Second, nil }
func (s *stubLock) Refresh(context.Context, time.Duration) error { return nil }
func (s *stubLock) Release(context.Context) error {
	close(s.released)
	fmt.Fprintln(os.Stderr, "stub lock released")
	return nil
}

func panicInTheWork() { panic("boom in the work") }

// A panic under Run keeps its value and the stack of the function that
// panicked: the release is deferred, not recovered and re-panicked. The
// child process dies of the panic; its crash report is what an operator
// reads.
func TestRunPanicKeepsStack(t *testing.T) {
	if os.Getenv("DLOCK_RUN_PANIC_CHILD") == "1" {
		// On a goroutine of its own: the testing package recovers and
		// re-raises panics of test goroutines, which would hide Run's way.
		l := &stubLock{ctx: context.Background(), released: make(chan struct{})}
		go func() {
			_ = dlock.Run(context.Background(), l, func(context.Context) error {
				panicInTheWork()
				return nil
			})
		}()
		time.Sleep(10 * time.Second) // the panic ends the process first
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunPanicKeepsStack$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DLOCK_RUN_PANIC_CHILD=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the child did not die of the panic: %v\n%s", err, out)
	}
	crash := string(out)
	for _, want := range []string{"stub lock released", "panic: boom in the work", "dlock_test.panicInTheWork"} {
		if !strings.Contains(crash, want) {
			t.Errorf("crash report lacks %q:\n%s", want, crash)
		}
	}
	if strings.Contains(crash, "recovered") {
		t.Errorf("the panic was recovered and raised again:\n%s", crash)
	}
}

// Run cancels the function's context with the lock's cause when the lock
// is lost, and reports the loss joined with the function's error.
func TestRunReportsLoss(t *testing.T) {
	lctx, lose := context.WithCancelCause(context.Background())
	l := &stubLock{ctx: lctx, released: make(chan struct{})}
	work := errors.New("work failed")
	err := dlock.Run(context.Background(), l, func(ctx context.Context) error {
		if got, ok := dlock.FromContext(ctx); !ok || got != dlock.Lock(l) {
			t.Error("the lock is not in the function's context")
		}
		lose(fmt.Errorf("%w: test", dlock.ErrLockLost))
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
			t.Errorf("cause %v, want ErrLockLost", context.Cause(ctx))
		}
		return work
	})
	if !errors.Is(err, work) || !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Run: %v, want the work's error joined with ErrLockLost", err)
	}
	var de *dlock.Error
	if !errors.As(err, &de) || de.Op != "do" || de.Name != "stub" {
		t.Fatalf("the loss is not a *dlock.Error of op do naming the lock: %v", err)
	}
	select {
	case <-l.released:
	default:
		t.Fatal("not released")
	}
}

// A function that releases its lock itself ends the run cleanly: no loss is
// reported for a release the function chose.
func TestRunFnReleasesItself(t *testing.T) {
	c, rdb, _ := setup(t)
	err := c.Do(bg, "self", func(ctx context.Context) error {
		l, _ := dlock.FromContext(ctx)
		return l.Release(ctx)
	})
	if err != nil {
		t.Fatalf("Do whose function released the lock: %v, want nil", err)
	}
	// Gone behind the holder's back (the key deleted, no renewal since):
	// Do's release finds it gone, a loss.
	err = c.Do(bg, "gone", func(ctx context.Context) error {
		return rdb.Del(bg, "dlock:{gone}").Err()
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do whose lock vanished: %v, want ErrLockLost", err)
	}
}

// The lock's own context carries that lock, not one its acquirer's context
// held.
func TestLockContextCarriesItself(t *testing.T) {
	c, _, _ := setup(t)
	_ = c.Do(bg, "outer", func(ctx context.Context) error {
		inner, err := c.TryAcquire(ctx, "inner") // ctx carries the outer lock
		if err != nil {
			return err
		}
		defer inner.Release(bg)
		if got, ok := dlock.FromContext(inner.Context()); !ok || got.Name() != "inner" {
			t.Errorf("FromContext(inner.Context()) = %v, %v; want the inner lock", got, ok)
		}
		return nil
	})
}

// Close releasing a lock under a running Do is reported: the work was not
// exclusive to its end.
func TestDoReportsClose(t *testing.T) {
	_, rdb, _ := setup(t)
	c := dlock.MustNew(rdb)
	done := make(chan error, 1)
	entered := make(chan struct{})
	go func() {
		done <- c.Do(bg, "closing", func(ctx context.Context) error {
			close(entered)
			<-ctx.Done()
			return nil
		})
	}()
	<-entered
	if err := c.Close(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Fatalf("Do under Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Do did not return after Close")
	}
}

// A nil Lock (a failed acquisition's) put in a context changes nothing:
// FromContext finds no lock, and acquisitions do not trip on it.
func TestNewContextNilLock(t *testing.T) {
	c, _, _ := setup(t)
	ctx := dlock.NewContext(bg, nil)
	if l, ok := dlock.FromContext(ctx); ok || l != nil {
		t.Fatalf("FromContext after NewContext(nil) = %v, %v", l, ok)
	}
	l, err := c.TryAcquire(ctx, "nil-ctx")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(bg)
}

// A goroutine started under a lock with a detached context waits for the
// lock like any caller, instead of being refused as the holder; a typed-nil
// Lock in a context trips nothing.
func TestDetachContext(t *testing.T) {
	c, _, _ := setup(t)
	got := make(chan error, 1)
	err := c.Do(bg, "job", func(ctx context.Context) error {
		go func() {
			// Outlives fn: without its cancellation, and without its lock.
			l, err := c.Acquire(dlock.DetachContext(context.WithoutCancel(ctx)), "job", dlock.WithWait(5*time.Second))
			if err == nil {
				_ = l.Release(bg)
			}
			got <- err
		}()
		time.Sleep(50 * time.Millisecond)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire from a detached context: %v, want the lock after the holder's release", err)
	}
	var typedNil *stubLock
	if _, err := c.TryAcquire(dlock.NewContext(bg, typedNil), "other"); err != nil {
		t.Fatalf("TryAcquire with a typed-nil Lock in the context: %v", err)
	}
}
