package dlock_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// The contention tests protect a deliberately unsafe read-modify-write (GET,
// then SET +1) with the lock: any overlap of two holders loses an increment,
// so the final count is exact only if exclusion held every time.

const (
	helperEnv = "DLOCK_TEST_HELPER"
	counter   = "counter"
	lockName  = "counter-lock"
)

// increment takes the lock and bumps the counter n times through rdb.
func increment(c *dlock.Client, rdb *redis.Client, n int) error {
	for range n {
		l, err := c.Acquire(bg, lockName, dlock.WithTTL(5*time.Second), dlock.WithWait(time.Minute))
		if err != nil {
			return err
		}
		v, err := rdb.Get(bg, counter).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if err := rdb.Set(bg, counter, v+1, 0).Err(); err != nil {
			return err
		}
		if err := l.Release(bg); err != nil {
			return err
		}
	}
	return nil
}

func split(total, parts int) []int {
	out := make([]int, parts)
	for i := range out {
		out[i] = total / parts
		if i < total%parts {
			out[i]++
		}
	}
	return out
}

func TestContentionGoroutines(t *testing.T) {
	const workers, total = 64, 5000
	srv, rdb := startCounterServer(t)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for _, n := range split(total, workers) {
		// Each goroutine has its own connection, as separate processes do.
		own := redis.NewClient(&redis.Options{Addr: srv, PoolSize: 1})
		t.Cleanup(func() { _ = own.Close() })
		c := dlock.MustNew(own)
		t.Cleanup(func() { _ = c.Close(bg) })
		wg.Go(func() { errs <- increment(c, own, n) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := rdb.Get(bg, counter).Int(); got != total {
		t.Fatalf("counter = %d after %d locked increments: exclusion broke", got, total)
	}
}

func TestContentionProcesses(t *testing.T) {
	const procs, total = 4, 5000
	addr, rdb := startCounterServer(t)
	var cmds []*exec.Cmd
	for _, n := range split(total, procs) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=increment", "REDIS_ADDR="+addr, "COUNT="+strconv.Itoa(n))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker process: %v", err)
		}
	}
	if got, _ := rdb.Get(bg, counter).Int(); got != total {
		t.Fatalf("counter = %d after %d locked increments in %d processes", got, total, procs)
	}
}

func startCounterServer(t *testing.T) (string, *redis.Client) {
	t.Helper()
	_, rdb, srv := setup(t)
	return srv.Addr, rdb
}

// helperProcess is the body of a worker process started by a test.
func helperProcess() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	switch os.Getenv(helperEnv) {
	case "increment":
		n, _ := strconv.Atoi(os.Getenv("COUNT"))
		c := dlock.MustNew(rdb)
		defer c.Close(bg)
		if err := increment(c, rdb, n); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			return 1
		}
		return 0
	case "hold":
		return holdProcess(rdb)
	case "pause":
		return pauseWorker(rdb)
	}
	fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv(helperEnv))
	return 2
}
