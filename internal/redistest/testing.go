package redistest

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Start launches a redis-server for one test and stops it in t.Cleanup. A
// missing redis-server fails the test loudly with the install command: a
// skipped test would count as passing without proving anything.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s, err := Launch(context.Background(), t.TempDir(), extra...)
	if errors.Is(err, ErrNoRedis) {
		t.Fatalf("%v", err)
	}
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// StartFlavor is Start with the server of the flavor named ("redis" or
// "valkey"), whatever FlavorEnv says (see LaunchFlavor). A missing server
// fails the test with the install hint.
func StartFlavor(t testing.TB, flavor string, extra ...string) *Server {
	t.Helper()
	s, err := LaunchFlavor(context.Background(), flavor, t.TempDir(), extra...)
	if err != nil {
		t.Fatalf("start %s: %v", flavor, err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Client returns a go-redis client for the server, closed in t.Cleanup.
// ContextTimeoutEnabled makes reads honor the context's deadline, which
// fault tests rely on.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
