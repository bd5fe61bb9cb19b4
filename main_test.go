package dlock_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// exampleAddr is the address of the redis-server that the Example functions
// use; TestMain starts it on a free port.
var exampleAddr string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperProcess())
	}
	dir, err := os.MkdirTemp("", "dlock-example-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, err := redistest.Launch(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleAddr = srv.Addr
	code := m.Run()
	srv.Kill()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// setup starts a redis-server for one test and returns a dlock client on it
// and a plain go-redis client for looking at what dlock wrote.
func setup(t *testing.T, opts ...dlock.Option) (*dlock.Client, *redis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	return newLocker(t, rdb, opts...), rdb, srv
}

// newLocker returns a dlock client closed at the end of the test, so no
// renewal or wake-up goroutine outlives it.
func newLocker(t testing.TB, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	c := dlock.New(rdb, opts...)
	t.Cleanup(func() { _ = c.Close(bg) })
	return c
}
