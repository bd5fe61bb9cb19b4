package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// dlock run --permits N: at most N commands inside at once, and more than
// one when N > 1. Each command counts itself in and out of a Redis counter
// and records when it found more than N inside.
func TestRunPermits(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const procs, n = 5, 2
	script := fmt.Sprintf(`c=$(redis-cli -p %[1]d INCR inside); [ "$c" -gt %[2]d ] && redis-cli -p %[1]d INCR over >/dev/null; [ "$c" -eq %[2]d ] && redis-cli -p %[1]d INCR full >/dev/null; sleep 0.3; redis-cli -p %[1]d DECR inside >/dev/null`, srv.Port, n)
	var wg sync.WaitGroup
	errs := make(chan string, procs)
	for range procs {
		wg.Go(func() {
			r := dlockRun(t, srv, "run", "--permits", fmt.Sprint(n), "-w", "30s", "pool", "--", "sh", "-c", script)
			if r.code != 0 {
				errs <- fmt.Sprintf("exit %d: %s", r.code, r.stderr)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	ctx := context.Background()
	if over := rdb.Get(ctx, "over").Val(); over != "" {
		t.Fatalf("more than %d commands inside at once %s times", n, over)
	}
	if full := rdb.Get(ctx, "full").Val(); full == "" {
		t.Fatalf("never %d commands inside at once: the permits did not let them in together", n)
	}
}

// list and inspect show a semaphore's permits and waiters; bad --permits
// and a mismatched n are refused.
func TestSemaphoreListInspect(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, owner := range []string{"enc-1", "enc-2"} {
		startDlock(t, srv, "run", "--permits", "2", "--owner", owner, "enc", "--", "sleep", "30")
	}
	waitFor(t, "two permits", func() bool { return rdb.ZCard(ctx, "dlock:{enc}:sem").Val() == 2 })
	startDlock(t, srv, "run", "--permits", "2", "--owner", "enc-3", "-w", "30s", "enc", "--", "sleep", "30")
	waitFor(t, "a waiter", func() bool { return rdb.ZCard(ctx, "dlock:{enc}:sem:q").Val() == 1 })

	r := dlockRun(t, srv, "inspect", "enc")
	if r.code != 0 {
		t.Fatalf("inspect: exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"semaphore, 2 of 2 permits held", "enc-1", "enc-2", "IN LINE", "enc-3"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("inspect output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = dlockRun(t, srv, "list", "-o", "json")
	var views []lockView
	if err := json.Unmarshal([]byte(r.stdout), &views); err != nil || len(views) != 1 {
		t.Fatalf("list -o json: %v: %s", err, r.stdout)
	}
	if v := views[0]; v.Kind != "semaphore" || v.Permits != 2 || len(v.Holders) != 2 || len(v.Queue) != 1 || v.Queue[0].Owner != "enc-3" {
		t.Fatalf("list view = %+v", v)
	}
	r = dlockRun(t, srv, "list")
	if !strings.Contains(r.stdout, "KIND") || !strings.Contains(r.stdout, "2/2 permits") {
		t.Fatalf("list output:\n%s", r.stdout)
	}

	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"run", "--permits", "0", "x", "--", "true"}, exitUsage},
		{[]string{"run", "--permits", "-1", "x", "--", "true"}, exitUsage},
		{[]string{"run", "--permits", "3", "-n", "enc", "--", "true"}, exitConflict},
	} {
		if r := dlockRun(t, srv, tt.args...); r.code != tt.want {
			t.Errorf("dlock %v: exit %d, want %d; stderr: %s", tt.args, r.code, tt.want, r.stderr)
		}
	}
}
