package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/internal/redistest"
)

// multiBackends runs f on a Client on a real redis-server (two Clients, for
// two processes) and on dlocktest's double (one Locker stands for a shared
// Redis). expire takes a name's lock from its holder behind its back, as a
// deleted key or an expired lease does.
func multiBackends(t *testing.T, f func(t *testing.T, a, b dlock.Locker, expire func(name string))) {
	t.Run("redis", func(t *testing.T) {
		_, rdb, _ := setup(t)
		a, b := newLocker(t, rdb), newLocker(t, rdb)
		f(t, a, b, func(name string) {
			if n, err := rdb.Del(bg, node.KeysOf(dlock.DefaultPrefix, name).Lock).Result(); err != nil || n != 1 {
				t.Fatalf("deleting the key of %q: %d, %v", name, n, err)
			}
		})
	})
	t.Run("dlocktest", func(t *testing.T) {
		l := dlocktest.MustNew()
		t.Cleanup(func() { _ = l.Close(bg) })
		f(t, l, l, func(name string) {
			if !l.Expire(name) {
				t.Fatalf("%q was not held", name)
			}
		})
	})
}

// Two groups of goroutines (on two Clients: two processes) take
// overlapping sets, each group giving its names in the other's reverse
// order. Taken in the order given, a holds x waiting for z while b holds z
// waiting for x: both wait out the wait limit. In canonical order nobody
// waits for a name while holding a later one, so every round succeeds, and
// no name ever has two holders.
func TestAcquireAllOverlappingSetsNeverDeadlock(t *testing.T) {
	multiBackends(t, func(t *testing.T, a, b dlock.Locker, _ func(string)) {
		sets := [][]string{
			{"x", "y", "z"}, {"z", "y", "x"}, // same set, opposite orders
			{"z", "w", "x"}, {"x", "w"}, // overlapping
		}
		var inside sync.Map // name -> *atomic.Int32: holders inside now
		for _, n := range []string{"w", "x", "y", "z"} {
			inside.Store(n, new(atomic.Int32))
		}
		const rounds = 25
		var done atomic.Int32
		errs := make(chan error, len(sets)*2)
		var wg sync.WaitGroup
		for i, set := range sets {
			for _, locker := range []dlock.Locker{a, b} {
				wg.Go(func() {
					for r := range rounds {
						// Within the bound, a deadlock ends as a wait limit.
						m, err := dlock.AcquireAll(bg, locker, set, dlock.WithTTL(time.Second), dlock.WithWait(3*time.Second))
						if err != nil {
							errs <- fmt.Errorf("set %d %v round %d: %w", i, set, r, err)
							return
						}
						for _, n := range set {
							if c, _ := inside.Load(n); c.(*atomic.Int32).Add(1) != 1 {
								errs <- fmt.Errorf("%q has two holders", n)
							}
						}
						time.Sleep(time.Millisecond)
						for _, n := range set {
							c, _ := inside.Load(n)
							c.(*atomic.Int32).Add(-1)
						}
						if err := m.Release(bg); err != nil {
							errs <- fmt.Errorf("release %v: %w", set, err)
							return
						}
						done.Add(1)
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got, want := done.Load(), int32(len(sets)*2*rounds); got != want {
			t.Fatalf("%d of %d rounds done", got, want)
		}
	})
}

// The 3rd of 3 names is busy: the first two are taken, then released before
// AcquireAll returns, and the error names the busy one.
func TestAcquireAllRollsBackWhenTheLastIsBusy(t *testing.T) {
	multiBackends(t, func(t *testing.T, holder, caller dlock.Locker, _ func(string)) {
		busy, err := holder.Acquire(bg, "r3")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Release(bg)

		const wait = 400 * time.Millisecond
		start := time.Now()
		m, err := dlock.AcquireAll(bg, caller, []string{"r3", "r1", "r2"}, dlock.WithWait(wait))
		took := time.Since(start)
		var e *dlock.Error
		if m != nil || !errors.Is(err, dlock.ErrNotObtained) || !errors.As(err, &e) || e.Name != "r3" {
			t.Fatalf("AcquireAll = %v, %v; want ErrNotObtained naming r3", m, err)
		}
		if took < wait || took > wait+300*time.Millisecond {
			t.Errorf("gave up after %v; the wait limit is %v", took, wait)
		}
		// Nothing left held: on Redis, no key of r1 or r2 is left.
		for _, n := range []string{"r1", "r2"} {
			if _, err := caller.(inspector).Inspect(bg, n); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("%s after the rollback: Inspect says %v; want ErrNotHeld", n, err)
			}
		}
		// And they are free for anyone at once.
		for _, n := range []string{"r1", "r2"} {
			l, err := holder.TryAcquire(bg, n)
			if err != nil {
				t.Fatalf("%s after the rollback: %v", n, err)
			}
			_ = l.Release(bg)
		}
	})
}

// The wait limit bounds the whole call: two names busy, the first freed
// after 60% of the limit, the second never; a wait limit per name would
// wait 160% of it.
func TestAcquireAllWaitBoundsTheWhole(t *testing.T) {
	_, rdb, _ := setup(t)
	holder, caller := newLocker(t, rdb), newLocker(t, rdb)
	first, err := holder.Acquire(bg, "wb1")
	if err != nil {
		t.Fatal(err)
	}
	second, err := holder.Acquire(bg, "wb2")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(bg)
	const wait = 600 * time.Millisecond
	freed := time.AfterFunc(wait*6/10, func() { _ = first.Release(bg) })
	defer freed.Stop()

	start := time.Now()
	_, err = dlock.AcquireAll(bg, caller, []string{"wb1", "wb2"}, dlock.WithWait(wait))
	took := time.Since(start)
	if !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), `"wb2"`) {
		t.Fatalf("AcquireAll: %v; want ErrNotObtained naming wb2", err)
	}
	if took > wait+250*time.Millisecond {
		t.Fatalf("gave up after %v: the wait limit of %v bounds each name, not the whole", took, wait)
	}
	if rdb.Exists(bg, node.KeysOf(dlock.DefaultPrefix, "wb1").Lock).Val() != 0 {
		t.Fatal("wb1 still held after the rollback")
	}
}

// Losing one name ends the MultiLock's context with ErrLockLost naming it;
// Release then releases the others and reports ErrNotHeld.
func TestAcquireAllLossOfOneEndsTheContext(t *testing.T) {
	multiBackends(t, func(t *testing.T, a, b dlock.Locker, expire func(string)) {
		m, err := dlock.AcquireAll(bg, a, []string{"l2", "l1"}, dlock.WithTTL(450*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Names(); got[0] != "l1" || got[1] != "l2" || m.Name() != "l1,l2" {
			t.Fatalf("Names() = %q, Name() = %q: not in canonical order", got, m.Name())
		}
		if f := m.Fences(); len(f) != 2 || m.Fence() != f[0] {
			t.Fatalf("Fences() = %v, Fence() = %d", f, m.Fence())
		}
		if got, _ := dlock.FromContext(m.Context()); got != dlock.Lock(m) {
			t.Fatal("the MultiLock's context does not carry it")
		}
		expire("l2")
		select {
		case <-m.Context().Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the MultiLock's context did not end after l2 was lost")
		}
		cause := context.Cause(m.Context())
		if !errors.Is(cause, dlock.ErrLockLost) || !strings.Contains(cause.Error(), `"l2"`) {
			t.Fatalf("cause %v: want ErrLockLost naming l2", cause)
		}
		if err := m.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("Release after the loss: %v; want ErrNotHeld", err)
		}
		if !errors.Is(context.Cause(m.Context()), dlock.ErrLockLost) {
			t.Fatal("Release replaced the loss as the context's cause")
		}
		// l1 was released all the same: another takes it at once.
		l, err := b.TryAcquire(bg, "l1")
		if err != nil {
			t.Fatalf("l1 after Release: %v", err)
		}
		_ = l.Release(bg)
	})
}

// A MultiLock in the context holds each of its names: acquiring any of them
// under it fails at once, also inside another AcquireAll, which then gives
// back what it took before.
func TestAcquireAllReentry(t *testing.T) {
	multiBackends(t, func(t *testing.T, a, b dlock.Locker, _ func(string)) {
		m, err := dlock.AcquireAll(bg, a, []string{"ra", "rz"})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Release(bg)
		ctx := m.Context()
		start := time.Now()
		if _, err := a.Acquire(ctx, "rz"); !errors.Is(err, dlock.ErrReentrant) {
			t.Fatalf("Acquire of a member under the MultiLock: %v; want ErrReentrant", err)
		}
		if _, err := dlock.AcquireAll(ctx, a, []string{"rm", "rz"}); !errors.Is(err, dlock.ErrReentrant) {
			t.Fatalf("AcquireAll overlapping the MultiLock under it: %v; want ErrReentrant", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("refused after %v: it waited for itself", took)
		}
		l, err := b.TryAcquire(bg, "rm")
		if err != nil {
			t.Fatalf("rm was not rolled back: %v", err)
		}
		_ = l.Release(bg)
		// Through Run too.
		err = dlock.Run(bg, m, func(ctx context.Context) error {
			_, err := a.TryAcquire(ctx, "ra")
			return err
		})
		if !errors.Is(err, dlock.ErrReentrant) {
			t.Fatalf("TryAcquire in Run under the MultiLock: %v; want ErrReentrant", err)
		}
	})
}

// Bad input is refused before anything is taken, naming the offending name.
func TestAcquireAllBadInput(t *testing.T) {
	_, rdb, _ := setup(t)
	c := newLocker(t, rdb)
	long := strings.Repeat("n", dlock.MaxNameLength+1)
	tests := []struct {
		name      string
		names     []string
		opts      []dlock.AcquireOption
		want      error
		named     string
		nilLocker bool
	}{
		{"nil", nil, nil, dlock.ErrInvalidName, "", false},
		{"empty", []string{}, nil, dlock.ErrInvalidName, "", false},
		{"duplicate", []string{"b1", "a1", "b1"}, nil, dlock.ErrInvalidName, "b1", false},
		{"empty name", []string{"a1", ""}, nil, dlock.ErrInvalidName, "", false},
		{"too long", []string{"a1", long}, nil, dlock.ErrInvalidName, long, false},
		{"starts with }", []string{"a1", "}x"}, nil, dlock.ErrInvalidName, "}x", false},
		{"negative wait", []string{"a1", "b1"}, []dlock.AcquireOption{dlock.WithWait(-time.Second)}, dlock.ErrInvalidOption, "a1,b1", false},
		{"bad ttl", []string{"a1", "b1"}, []dlock.AcquireOption{dlock.WithTTL(time.Nanosecond)}, dlock.ErrInvalidTTL, "a1", false},
		{"nil locker", []string{"b1", "a1"}, nil, dlock.ErrInvalidOption, "a1,b1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var locker dlock.Locker = c
			if tt.nilLocker {
				locker = nil
			}
			m, err := dlock.AcquireAll(bg, locker, tt.names, tt.opts...)
			var e *dlock.Error
			if m != nil || !errors.Is(err, tt.want) || !errors.As(err, &e) || e.Op != "acquire" || e.Name != tt.named {
				t.Fatalf("AcquireAll(%q) = %v, %v; want an *Error naming %q matching %v", tt.names, m, err, tt.named, tt.want)
			}
			if n := rdb.DBSize(bg).Val(); n != 0 {
				keys := rdb.Keys(bg, "*").Val()
				t.Fatalf("%d keys in Redis after refused input: %q", n, keys)
			}
		})
	}
}

// A fixed test of what the grant writes: one key per name, nothing shared.
func TestAcquireAllKeys(t *testing.T) {
	_, rdb, _ := setup(t)
	c := newLocker(t, rdb)
	m, err := dlock.AcquireAll(bg, c, []string{"k2", "k1"})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range m.Names() {
		h := rdb.HGetAll(bg, node.KeysOf(dlock.DefaultPrefix, n).Lock).Val()
		if h["token"] != m.Locks()[i].Token() || h["fence"] != fmt.Sprint(m.Fences()[i]) {
			t.Fatalf("%s in Redis: %v", n, h)
		}
	}
	ttl, err := m.TTL(bg)
	if err != nil || ttl <= 0 || ttl > dlock.DefaultTTL {
		t.Fatalf("TTL = %v, %v", ttl, err)
	}
	if err := m.Refresh(bg, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := m.TTL(bg); ttl < dlock.DefaultTTL {
		t.Fatalf("TTL after Refresh(1m) = %v", ttl)
	}
	if err := m.Release(bg); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Release: %v; want ErrNotHeld", err)
	}
	if n := rdb.Exists(bg, node.KeysOf(dlock.DefaultPrefix, "k1").Lock, node.KeysOf(dlock.DefaultPrefix, "k2").Lock).Val(); n != 0 {
		t.Fatalf("%d keys left after Release", n)
	}
}

// Move stock between two warehouses: both rows locked, whatever order the
// caller names them in, so a transfer the other way cannot deadlock it.
func ExampleAcquireAll() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	m, err := dlock.AcquireAll(ctx, locker, []string{"stock:lyon", "stock:bonn"}, dlock.WithWait(5*time.Second))
	if err != nil {
		fmt.Println("not moved:", err)
		return
	}
	err = dlock.Run(ctx, m, func(ctx context.Context) error {
		fmt.Println("holding", m.Names(), "with", len(m.Fences()), "fences")
		return nil
	})
	fmt.Println("moved:", err == nil)
	// Output:
	// holding [stock:bonn stock:lyon] with 2 fences
	// moved: true
}

// BenchmarkAcquireAll measures an uncontended AcquireAll and Release of n
// names: n acquire scripts one after the other (the canonical order admits
// no parallel taking) and n releases.
func BenchmarkAcquireAll(b *testing.B) {
	srv := redistest.Start(b)
	c := newLocker(b, srv.Client(b))
	for _, n := range []int{1, 3, 10} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprint("bench-all-", i)
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				m, err := dlock.AcquireAll(bg, c, names)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Release(bg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
