package dlockhttp_test

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

// exampleAddr is the redis-server the Example functions use; TestMain starts
// it, since an Example has no *testing.T to start one with.
var exampleAddr string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlockhttp-example-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, err := redistest.Launch(context.Background(), dir)
	if err != nil {
		// Loud, with the install hint (redistest.ErrNoRedis): a skipped
		// test would pass without proving anything.
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleAddr = srv.Addr
	code := m.Run()
	srv.Kill()
	_ = os.RemoveAll(dir)
	if code == 0 {
		// Every renewal loop, pub/sub reader, HTTP server and connection
		// started by a test must be gone by now.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var bg = context.Background()

// setup starts a redis-server for one test and returns a dlock client on it,
// closed at the end of the test, and a plain client to look at Redis with.
func setup(t *testing.T) (*dlock.Client, *redis.Client) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close(bg) })
	return c, rdb
}
