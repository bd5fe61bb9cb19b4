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
		{"unlock", "--force", "--yes", "x"}, {"watch", "x"}, {"run", "-N", "a", "-N", "b", "true"},
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
