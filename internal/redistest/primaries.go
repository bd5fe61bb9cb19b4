package redistest

import "testing"

// StartPrimaries starts n independent standalone servers, for Redlock-style
// tests that need a majority of unrelated primaries. extra is passed to every
// server (see Start). Each is stopped in t.Cleanup, and each can be killed,
// paused or restarted on its own: Restart gives an empty server on the same
// port, which is how a Redlock instance without persistence loses its locks.
func StartPrimaries(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest: StartPrimaries needs n >= 1, got %d", n)
	}
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(t, extra...)
	}
	return servers
}
