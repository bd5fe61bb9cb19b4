package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/observe"
	"github.com/dlock-go/dlock/redlock"
)

// TestMain fails the run when a goroutine outlives the tests: every
// goroutine a Redlock starts must end with its Close. go-redis' own
// background dial of a node that was down (redisDialer) sleeps up to a
// second after its client closed: a Release, a renewal's re-take or a
// loss's give-up reaches every node, the dead ones too.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redisDialer) }

var bg = context.Background()

// startNodes starts n independent redis-servers and returns them with a
// client for each, closed at the end of the test.
func startNodes(t *testing.T, n int) ([]*redistest.Server, []redis.UniversalClient) {
	t.Helper()
	srvs := redistest.StartPrimaries(t, n)
	rdbs := make([]redis.UniversalClient, n)
	for i, s := range srvs {
		// No retries: a dead node must fail fast, not after go-redis'
		// backoff.
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		rdbs[i] = rdb
	}
	return srvs, rdbs
}

// newRedlock returns a Redlock closed at the end of the test.
func newRedlock(t *testing.T, rdbs []redis.UniversalClient, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	r, err := redlock.New(rdbs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(bg) })
	return r
}

// waitFor polls cond every 10ms for at most 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 5s waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// asLock returns the *redlock.Lock in l, failing the test if it is another
// type.
func asLock(t *testing.T, l dlock.Lock) *redlock.Lock {
	t.Helper()
	m, ok := l.(*redlock.Lock)
	if !ok {
		t.Fatalf("lock of type %T, want *redlock.Lock", l)
	}
	return m
}

// exists counts the nodes where key exists.
func exists(rdbs []redis.UniversalClient, key string) int {
	n := 0
	for _, rdb := range rdbs {
		n += int(rdb.Exists(bg, key).Val())
	}
	return n
}

// recorder is an Observer that keeps every event.
type recorder struct {
	observe.BaseObserver
	mu       sync.Mutex
	acquires []observe.AcquireEvent
	renews   []observe.RenewEvent
	losts    []observe.LostEvent
	releases []observe.ReleaseEvent
}

func (o *recorder) OnAcquire(_ context.Context, e observe.AcquireEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acquires = append(o.acquires, e)
}

func (o *recorder) OnRenew(e observe.RenewEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.renews = append(o.renews, e)
}

func (o *recorder) OnLost(e observe.LostEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.losts = append(o.losts, e)
}

func (o *recorder) OnRelease(_ context.Context, e observe.ReleaseEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.releases = append(o.releases, e)
}

// lastAcquire returns the latest acquire event.
func (o *recorder) lastAcquire(t *testing.T) observe.AcquireEvent {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.acquires) == 0 {
		t.Fatal("no acquire event")
	}
	return o.acquires[len(o.acquires)-1]
}

func (o *recorder) counts() (acquires, renews, losts, releases int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.acquires), len(o.renews), len(o.losts), len(o.releases)
}
