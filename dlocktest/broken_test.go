package dlocktest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/lockerkit"
)

// brokenEnv names the promise a helper process breaks.
const brokenEnv = "DLOCKTEST_BROKEN"

func brokenVariant() string { return os.Getenv(brokenEnv) }

// brokenLocker is the double with one promise broken, to show that the
// conformance suite notices.
type brokenLocker struct {
	*dlocktest.Locker
	variant string
}

func (b *brokenLocker) wrap(lk dlock.Lock, err error) (dlock.Lock, error) {
	if b.variant == "bare-busy" && errors.Is(err, dlock.ErrNotObtained) {
		return nil, dlock.ErrNotObtained // no *dlock.Error, no *NotObtainedError
	}
	if err != nil {
		return nil, err
	}
	return &brokenLock{Lock: lk, variant: b.variant}, nil
}

func (b *brokenLocker) TryAcquire(ctx context.Context, name string, opts ...dlock.AcquireOption) (dlock.Lock, error) {
	return b.wrap(b.Locker.TryAcquire(ctx, name, b.opts(name, opts)...))
}

func (b *brokenLocker) Acquire(ctx context.Context, name string, opts ...dlock.AcquireOption) (dlock.Lock, error) {
	return b.wrap(b.Locker.Acquire(ctx, name, b.opts(name, opts)...))
}

// opts lets every reader skip waiting writers in the writers-starve variant.
func (b *brokenLocker) opts(name string, opts []dlock.AcquireOption) []dlock.AcquireOption {
	if s, err := lockerkit.ReadAcquireOptions(name, lockerkit.DefaultTTLBounds, opts...); b.variant == "writers-starve" && err == nil && s.Shared {
		return append(opts, dlock.WithoutWriterPriority())
	}
	return opts
}

func (b *brokenLocker) Do(ctx context.Context, name string, fn func(context.Context) error, opts ...dlock.AcquireOption) error {
	lk, err := b.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return dlock.Run(ctx, lk, fn)
}

type brokenLock struct {
	dlock.Lock
	variant string
}

func (b *brokenLock) Fence() int64 {
	if b.variant == "stuck-fence" {
		return 1
	}
	return b.Lock.Fence()
}

func (b *brokenLock) Release(ctx context.Context) error {
	err := b.Lock.Release(ctx)
	if b.variant == "double-release" && errors.Is(err, dlock.ErrNotHeld) {
		return nil
	}
	return err
}

func (b *brokenLock) Context() context.Context {
	if b.variant == "deaf" {
		return context.Background() // the holder never learns the lock ended
	}
	return b.Lock.Context()
}

// TestBrokenLockerHelper runs the suite against a broken double in a helper
// process of TestConformanceCatchesBrokenLockers; it is meant to fail.
func TestBrokenLockerHelper(t *testing.T) {
	variant := brokenVariant()
	if variant == "" {
		t.Skip("a helper process of TestConformanceCatchesBrokenLockers")
	}
	h := harness((*dlocktest.Locker).Expire)
	h.New = func(t *testing.T) dlock.Locker {
		l := dlocktest.MustNew()
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return &brokenLocker{Locker: l, variant: variant}
	}
	h.Expire = func(t *testing.T, l dlock.Locker, name string) { l.(*brokenLocker).Expire(name) }
	h.Waiters = func(l dlock.Locker, name string) int { return l.(*brokenLocker).Waiters(name) }
	h.Patience = time.Second
	h.Shared = true
	if variant == "deaf" {
		h.Patience = 300 * time.Millisecond // it waits the patience out in every subtest
	}
	dlocktest.Conformance(t, h)
}

// The suite can fail: each broken promise fails the subtests listed. Only
// those run, to keep the deaf variant, which waits out the patience in each,
// short.
func TestConformanceCatchesBrokenLockers(t *testing.T) {
	if brokenVariant() != "" {
		t.Skip("in a helper process")
	}
	t.Parallel()
	for variant, want := range map[string][]string{
		"stuck-fence":    {"RoundTrip", "HandOff", "FIFO", "FencesGrow", "Loss", "LeaseWithoutRenewal", "MaxHold", "MutualExclusion", "SharedCoexist", "SharedExcludesWriter", "SharedLoss"},
		"double-release": {"AfterRelease", "Loss", "LeaseWithoutRenewal", "NotHeldOnceLost", "MaxHold", "Do", "Close"},
		"bare-busy":      {"BusyError", "WaitLimit", "ContextCancelled", "ContextDeadline", "RenewalKeepsLock", "DoBusy"},
		"deaf":           {"RoundTrip", "FencesGrow", "Loss", "LeaseWithoutRenewal", "NotHeldOnceLost", "MaxHold", "DoLoss", "Close", "SharedLoss"},
		"writers-starve": {"SharedWaitingWriterFirst"},
	} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			run := "^TestBrokenLockerHelper$/^(" + strings.Join(want, "|") + ")$"
			cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.v", "-test.count=1", "-test.timeout=2m")
			cmd.Env = append(os.Environ(), brokenEnv+"="+variant)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed a locker with %s (err %v):\n%s", variant, err, out)
			}
			var failed []string
			for _, m := range regexp.MustCompile(`--- FAIL: TestBrokenLockerHelper/(\w+)`).FindAllSubmatch(out, -1) {
				failed = append(failed, string(m[1]))
			}
			t.Logf("%s fails %v", variant, failed)
			for _, w := range want {
				if !slices.Contains(failed, w) {
					t.Errorf("%s: subtest %s passed, want it to fail; output:\n%s", variant, w, out)
				}
			}
		})
	}
}
