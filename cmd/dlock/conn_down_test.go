package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// A Redis that is down, or a wrong port, is told within --timeout, with
// the address tried and how to name another, by every command that talks
// to Redis: not after seconds of go-redis' retries (1.7 to 3.4 s, watch 5
// s silent, run a whole --wait), and without go-redis' own log lines.
func TestUnreachableRedisAnswersWithinTimeout(t *testing.T) {
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	check := func(what string, r result, took time.Duration, from string) {
		t.Helper()
		if r.code != exitRedis || !strings.Contains(r.stderr, "cannot reach Redis at "+addr+" "+from) ||
			!strings.Contains(r.stderr, "connection refused") || !strings.Contains(r.stderr, "-h/-p") || !strings.Contains(r.stderr, "$DLOCK_URL") {
			t.Errorf("%s: exit %d, stderr %q; want %d naming %s %s, the reason and the flags", what, r.code, r.stderr, exitRedis, addr, from)
		}
		if strings.Contains(r.stderr, "pool.go") || strings.Contains(r.stderr, "redis: ") {
			t.Errorf("%s: go-redis' log in stderr: %q", what, r.stderr)
		}
		if took > 2*time.Second {
			t.Errorf("%s took %v with --timeout 1s", what, took)
		}
	}
	for _, args := range [][]string{
		{"list"}, {"inspect", "x"}, {"run", "x", "true"}, {"lock", "x"},
		{"unlock", "--force", "--yes", "x"}, {"watch", "x"}, {"run", "-N", "a", "-N", "b", "true"}, {"doctor"},
	} {
		start := time.Now()
		r := dlockRun(t, nil, append([]string{"--timeout", "1s", "--addr", addr}, args...)...)
		check(strings.Join(args, " "), r, time.Since(start), "(--addr)")
	}
	start := time.Now()
	r := dlockRunEnv(t, []string{"DLOCK_URL=redis://" + addr}, "--timeout", "1s", "list")
	check("list with $DLOCK_URL", r, time.Since(start), "(from $DLOCK_URL)")
	start = time.Now()
	r = dlockRun(t, nil, "--timeout", "1s", "-p", strconv.Itoa(port), "list")
	check("list -p", r, time.Since(start), "(-h/-p)")
}

// Without --timeout, run and lock wait for Redis at most a third of --ttl
// (up to the 5s default), the bound their help gives for a renewal to be
// retried in time; a --timeout above it is taken, with a warning.
func TestTimeoutDefaultFollowsTTL(t *testing.T) {
	srv := redistest.Start(t)
	if r := dlockRun(t, srv, "run", "--ttl", "3s", "--timeout", "2s", "j", "true"); r.code != 0 ||
		!strings.Contains(r.stderr, "warning: --timeout 2s is above a third of --ttl 3s (1s)") {
		t.Errorf("run --ttl 3s --timeout 2s: exit %d, stderr %q; want 0 and a warning naming both bounds", r.code, r.stderr)
	}
	for _, args := range [][]string{{"run", "--ttl", "3s", "--timeout", "1s", "j", "true"}, {"run", "--ttl", "3s", "j", "true"}, {"lock", "--help"}} {
		if r := dlockRun(t, srv, args...); r.code != 0 || strings.Contains(r.stderr, "warning") {
			t.Errorf("dlock %q: exit %d, stderr %q; want 0 and no warning", args, r.code, r.stderr)
		}
	}

	srv.Pause() // accepts connections (the kernel does), answers nothing
	t.Cleanup(srv.Resume)
	for _, tt := range []struct {
		args   []string
		within string
	}{
		{[]string{"lock", "--ttl", "1.5s", "-n", "j"}, "500ms"},
		{[]string{"run", "--ttl", "1.5s", "-n", "j", "true"}, "500ms"},
		{[]string{"run", "--ttl", "60s", "-n", "j", "true"}, "5s"},
		{[]string{"--timeout", "300ms", "lock", "-n", "j"}, "300ms"},
	} {
		start := time.Now()
		r := dlockRun(t, srv, tt.args...)
		if r.code != exitRedis || !strings.Contains(r.stderr, "no answer from Redis at "+srv.Addr+" (--addr) within "+tt.within) {
			t.Errorf("dlock %q on a paused Redis: exit %d after %v, stderr %q; want %d, no answer within %s",
				tt.args, r.code, time.Since(start), r.stderr, exitRedis, tt.within)
		}
	}
}
