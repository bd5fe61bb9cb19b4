package flightcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var bg = context.Background()

// Callers of one key at once share one read; within the TTL none reads.
func TestShareAndKeep(t *testing.T) {
	c := New[string, int](time.Hour, 4)
	var reads atomic.Int32
	release := make(chan struct{})
	read := func(context.Context) (int, error) {
		reads.Add(1)
		<-release
		return 42, nil
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if v, _, err := c.Get(bg, "k", read); v != 42 || err != nil {
				t.Errorf("Get: %v, %v", v, err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // let them pile up on the one read
	close(release)
	wg.Wait()
	if _, fresh, _ := c.Get(bg, "k", read); fresh {
		t.Error("a value within its TTL was read again")
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads, want 1", n)
	}
	c.Forget()
	if _, fresh, _ := c.Get(bg, "k", read); !fresh || reads.Load() != 2 {
		t.Fatal("Forget did not make the next Get read")
	}
}

// Reads of different keys never overlap, and a caller who waits too long
// for its turn gives up with its context's error.
func TestOneReadAtATime(t *testing.T) {
	c := New[int, int](0, 4)
	var running, most atomic.Int32
	read := func(context.Context) (int, error) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(10 * time.Millisecond)
		running.Add(-1)
		return 0, nil
	}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() { _, _, _ = c.Get(bg, i, read) })
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d reads ran at once, want 1", most.Load())
	}

	block := make(chan struct{})
	started := make(chan struct{})
	go func() {
		_, _, _ = c.Get(bg, 1, func(context.Context) (int, error) { close(started); <-block; return 0, nil })
	}()
	<-started
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	if _, _, err := c.Get(ctx, 2, read); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting for the turn: %v, want the deadline", err)
	}
	close(block)
}

// A caller sharing a read whose own caller left reads itself; a failed
// read is not kept.
func TestAbandonedAndFailed(t *testing.T) {
	c := New[string, int](time.Hour, 4)
	ctx, cancel := context.WithCancel(bg)
	started := make(chan struct{})
	leader := make(chan error, 1)
	go func() {
		_, _, err := c.Get(ctx, "k", func(ctx context.Context) (int, error) { close(started); <-ctx.Done(); return 0, ctx.Err() })
		leader <- err
	}()
	<-started
	follower := make(chan int, 1)
	go func() {
		v, _, _ := c.Get(bg, "k", func(context.Context) (int, error) { return 7, nil })
		follower <- v
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Fatalf("leader: %v", err)
	}
	if v := <-follower; v != 7 {
		t.Fatalf("follower got %d, want its own read's 7", v)
	}

	boom := errors.New("boom")
	if _, _, err := c.Get(bg, "f", func(context.Context) (int, error) { return 0, boom }); err != boom {
		t.Fatal(err)
	}
	if v, fresh, err := c.Get(bg, "f", func(context.Context) (int, error) { return 1, nil }); v != 1 || !fresh || err != nil {
		t.Fatalf("after a failed read: %v %v %v, want a new read", v, fresh, err)
	}
}

// No more than keep values are kept, whatever keys callers make up.
func TestKeepBound(t *testing.T) {
	c := New[int, int](time.Hour, 3)
	for i := range 100 {
		_, _, _ = c.Get(bg, i, func(context.Context) (int, error) { return i, nil })
	}
	c.mu.Lock()
	n := len(c.entries)
	c.mu.Unlock()
	if n > 3 {
		t.Fatalf("%d values kept, want at most 3", n)
	}
	if _, fresh, _ := c.Get(bg, 99, func(context.Context) (int, error) { return 0, nil }); fresh {
		t.Error("the newest value was evicted")
	}
}

// A panicking read frees the turn, and the panic goes on.
func TestPanicFreesTurn(t *testing.T) {
	c := New[string, int](time.Hour, 3)
	func() {
		defer func() {
			if r := recover(); r != "read panic" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_, _, _ = c.Get(bg, "p", func(context.Context) (int, error) { panic("read panic") })
	}()
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	if v, _, err := c.Get(ctx, "p", func(context.Context) (int, error) { return 5, nil }); v != 5 || err != nil {
		t.Fatalf("after a panic: %v %v", v, err)
	}
}
