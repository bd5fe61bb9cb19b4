package dlock_test

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

// exampleAddr is the address of the redis-server that the Example functions
// use; TestMain starts it on a free port.
var exampleAddr string

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperProcess())
	}
	os.Exit(redistest.RunMain(m, &exampleAddr))
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
	c := dlock.MustNew(rdb, opts...)
	t.Cleanup(func() { _ = c.Close(bg) })
	return c
}

// proxied returns a client that reaches srv through a fault proxy, with
// ContextTimeoutEnabled (so a blackholed read ends at the caller's
// deadline), both closed at the end of the test.
func proxied(t *testing.T, srv *redistest.Server, opts redis.Options) (*redis.Client, *faultproxy.Proxy) {
	t.Helper()
	proxy, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	opts.Addr, opts.ContextTimeoutEnabled = proxy.Addr(), true
	rdb := redis.NewClient(&opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, proxy
}
