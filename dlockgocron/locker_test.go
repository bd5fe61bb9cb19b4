package dlockgocron_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgocron"
)

var bg = context.Background()

// newClient is a dlock Client with a connection of its own to addr: one
// instance of the service.
func newClient(t *testing.T, addr string) *dlock.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c := dlock.MustNew(rdb)
	t.Cleanup(func() {
		_ = c.Close(bg)
		_ = rdb.Close()
	})
	return c
}

// late is a gocron.Locker whose instance fires each tick late by d: its
// clock or its scheduler is behind.
type late struct {
	gocron.Locker
	d time.Duration
}

func (l late) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	time.Sleep(l.d)
	return l.Locker.Lock(ctx, key)
}

// runs counts the runs of a job per tick (the second it was due).
type runs struct {
	mu     sync.Mutex
	byTick map[time.Time]int
}

func (r *runs) job(lateness time.Duration) func() {
	return func() {
		tick := time.Now().Add(-lateness).Round(time.Second)
		r.mu.Lock()
		r.byTick[tick]++
		r.mu.Unlock()
		time.Sleep(50 * time.Millisecond) // a quick job
	}
}

func (r *runs) ticks() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byTick)
}

// twoInstances runs the job "report" every second on two schedulers, each
// with its own Client on one Redis, the second firing 300ms late, until
// three ticks have run; it returns the runs per tick.
func twoInstances(t *testing.T, minHold time.Duration) map[time.Time]int {
	addr := startRedis(t)
	r := &runs{byTick: map[time.Time]int{}}
	const lateness = 300 * time.Millisecond
	var scheds []gocron.Scheduler
	for i, delay := range []time.Duration{0, lateness} {
		jobs, err := dlockgocron.New(newClient(t, addr), minHold, 0, dlock.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(late{jobs, delay}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(r.job(delay)),
			gocron.WithName("report")); err != nil {
			t.Fatalf("scheduler %d: %v", i, err)
		}
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		s.Start()
	}
	deadline := time.Now().Add(8 * time.Second)
	for r.ticks() < 4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	// The late instance's attempt at the last tick ends within this.
	time.Sleep(lateness + 200*time.Millisecond)
	for _, s := range scheds {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	counts := make([]int, 0, len(r.byTick))
	for _, n := range r.byTick {
		counts = append(counts, n)
	}
	t.Logf("min hold %v: runs per tick %v", minHold, counts)
	if len(r.byTick) < 3 {
		t.Fatalf("runs in %d ticks after 8s, want at least 3", len(r.byTick))
	}
	return r.byTick
}

// Two instances fire the same job on the same ticks, one 300ms late; the job
// takes 50ms. With a min hold it runs once per tick.
func TestOncePerTick(t *testing.T) {
	for tick, n := range twoInstances(t, 700*time.Millisecond) {
		if n != 1 {
			t.Errorf("tick %v: %d runs, want 1", tick.Format("15:04:05"), n)
		}
	}
}

// The control that shows TestOncePerTick can fail: without a min hold the
// quick job's lock is free before the late instance fires, and it runs again.
func TestTwicePerTickWithoutMinHold(t *testing.T) {
	twice := 0
	for _, n := range twoInstances(t, 0) {
		if n == 2 {
			twice++
		}
	}
	if twice == 0 {
		t.Fatal("without a min hold no tick ran twice: the test of the min hold proves nothing")
	}
}

// Lock maps a busy lock to an error gocron skips the run on, matching
// dlock.ErrNotObtained; after the min hold the next Lock gets it.
func TestLockBusyAndMinHold(t *testing.T) {
	addr := startRedis(t)
	a, err := dlockgocron.New(newClient(t, addr), 500*time.Millisecond, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, err := dlockgocron.New(newClient(t, addr), 500*time.Millisecond, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := a.Lock(bg, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(bg, "job"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("during the min hold: %v, want ErrNotObtained", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		l, err := b.Lock(bg, "job")
		if err == nil {
			if took := time.Since(start); took < 480*time.Millisecond {
				t.Fatalf("lock free again %v after it was taken, before the 500ms min hold", took)
			}
			_ = l.Unlock(bg)
			break
		}
		if !errors.Is(err, dlock.ErrNotObtained) || time.Now().After(deadline) {
			t.Fatalf("after the min hold: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewRefuses(t *testing.T) {
	c := newClient(t, startRedis(t))
	for _, tc := range []struct {
		name     string
		l        dlock.Locker
		min, max time.Duration
	}{
		{"nil locker", nil, time.Second, 0},
		{"negative min hold", c, -time.Second, 0},
		{"negative max hold", c, time.Second, -time.Second},
		{"min above max", c, 2 * time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := dlockgocron.New(tc.l, tc.min, tc.max); !errors.Is(err, dlock.ErrInvalidOption) {
				t.Fatalf("New: %v, want ErrInvalidOption", err)
			}
		})
	}
}
