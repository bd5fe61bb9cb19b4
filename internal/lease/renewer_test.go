package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/lease"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// holder is a test Holder: each renewal sends one refresh of its key to
// its node, and records when the reply came and what it said.
type holder struct {
	r    *lease.Renewer
	lane string
	conn redis.Cmdable
	keys node.Keys
	tok  string
	ttl  time.Duration

	mu      sync.Mutex
	entry   lease.Entry
	answers []answer
	calls   []time.Time // when each call was made
	due     int         // renewals the Renewer asked for
	dueAt   []time.Time // when
	stopped bool
}

type answer struct {
	at  time.Time
	err error
}

func (h *holder) Renewal(now time.Time) ([]lease.Part, lease.Round, bool) {
	h.mu.Lock()
	h.due++
	h.dueAt = append(h.dueAt, now)
	h.mu.Unlock()
	return []lease.Part{{Lane: h.lane, Conn: h.conn}}, h, true
}

func (h *holder) Call(_ int, now time.Time) (node.Call, time.Time, bool) {
	h.mu.Lock()
	h.calls = append(h.calls, now)
	h.mu.Unlock()
	return node.Refresh(h.keys, h.tok, h.ttl), now.Add(h.ttl), true
}

func (h *holder) Answer(_ int, reply node.Reply) {
	_, err := reply.Int64()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answers = append(h.answers, answer{time.Now(), err})
	if !h.stopped {
		h.r.Schedule(&h.entry, h, time.Now().Add(h.ttl/3))
	}
}

func (h *holder) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.r.Schedule(&h.entry, h, time.Now())
}

func (h *holder) stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.r.Forget(&h.entry)
}

// ok counts the answers without error since t.
func (h *holder) ok(since time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, a := range h.answers {
		if a.err == nil && a.at.After(since) {
			n++
		}
	}
	return n
}

// A node that hangs holds up only its own lane: with one of two Redis
// servers SIGSTOPped, the holder on the other keeps being renewed every
// third of its TTL, while the stopped node's renewal waits out its bound.
func TestRenewerHungLaneHoldsUpOnlyItself(t *testing.T) {
	srvs := redistest.StartPrimaries(t, 2)
	r := lease.NewRenewer()
	defer r.Close()
	var hs []*holder
	for i, s := range srvs {
		rdb := s.Client(t)
		k := node.KeysOf("lease:", "n"+s.Addr)
		tok := "0123456789abcdef0123456789abcdef"
		// A key of ours to refresh: the acquire script grants it.
		if err := node.Acquire(k, tok, node.AcquireArgs{TTL: time.Minute, Alive: time.Second, QueueExpiry: time.Second, FenceLifetime: time.Hour}).Run(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, &holder{r: r, lane: string(rune('a' + i)), conn: rdb, keys: k, tok: tok, ttl: 600 * time.Millisecond})
	}
	hs[1].ttl = 5 * time.Second // the stopped node's renewal waits 5 s for its reply
	srvs[1].Pause()
	defer srvs[1].Resume()
	since := time.Now()
	for _, h := range hs {
		h.start()
	}
	// Three renewals of the healthy holder, 200 ms apart, while the
	// stopped node's first pipeline waits out its 5 s bound.
	deadline := since.Add(4 * time.Second)
	for hs[0].ok(since) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the healthy node's holder was renewed %d times in 4 s, want 3: held up by the stopped node", hs[0].ok(since))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := hs[1].ok(since); n != 0 {
		t.Fatalf("%d renewals answered by a stopped node", n)
	}
	for _, h := range hs {
		h.stop()
	}
}

// gatePipeline holds the first pipeline carrying match, after Redis ran it,
// until open is closed.
type gatePipeline struct {
	match string
	once  sync.Once
	held  chan struct{}
	open  chan struct{}
}

func (g *gatePipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *gatePipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *gatePipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if strings.Contains(fmt.Sprint(cmd.Args()...), g.match) {
				first := false
				g.once.Do(func() { first = true })
				if first {
					close(g.held)
					<-g.open
				}
				break
			}
		}
		return err
	}
}

// A call is made when its lane sends it, not when its renewal was due: a
// renewal that waits in its lane behind another pipeline to the node asks,
// once it leaves, for a lease measured from then (a lease cut to a hold
// limit at the due time would run past the limit by the wait).
func TestRenewerMakesQueuedCallWhenItLeaves(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	gate := &gatePipeline{match: "lease:{first}", held: make(chan struct{}), open: make(chan struct{})}
	rdb.AddHook(gate)
	opened := sync.OnceFunc(func() { close(gate.open) })
	r := lease.NewRenewer()
	defer r.Close()
	defer opened() // before Close, which waits for the held pipeline
	tok := "0123456789abcdef0123456789abcdef"
	mk := func(name, lane string) *holder {
		return &holder{r: r, lane: lane, conn: rdb, keys: node.KeysOf("lease:", name), tok: tok, ttl: time.Hour}
	}
	first, queued, other := mk("first", "a"), mk("queued", "a"), mk("other", "b")
	other.start() // a second lane: lanes have senders of their own
	first.start()
	<-gate.held // first's pipeline is out on lane a, its reply held
	queued.start()
	waitUntil(t, "queued's renewal to wait in lane a", func() bool {
		queued.mu.Lock()
		defer queued.mu.Unlock()
		return queued.due > 0
	})
	released := time.Now()
	opened()
	waitUntil(t, "queued's call", func() bool {
		queued.mu.Lock()
		defer queued.mu.Unlock()
		return len(queued.calls) > 0
	})
	queued.mu.Lock()
	at, dueAt := queued.calls[0], queued.dueAt[0]
	queued.mu.Unlock()
	// It leaves when first's pipeline returns, or when another sender takes
	// it after the stall bound (50 ms): either way later than when it was
	// due.
	if at.Before(released) && at.Before(dueAt.Add(40*time.Millisecond)) {
		t.Fatalf("the queued call was made %v after it was due, %v before its lane could send it",
			at.Sub(dueAt), released.Sub(at))
	}
	for _, h := range []*holder{first, queued, other} {
		h.stop()
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Forget takes a scheduled holder out; Close ends the loop and waits for
// the pipelines out (goleak in TestMain sees a sender left behind).
func TestRenewerForgetAndClose(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	r := lease.NewRenewer()
	h := &holder{r: r, conn: rdb, keys: node.KeysOf("lease:", "forget"), tok: "0123456789abcdef0123456789abcdef", ttl: time.Hour}
	h.mu.Lock()
	r.Schedule(&h.entry, h, time.Now().Add(time.Hour))
	h.mu.Unlock()
	if n := r.Scheduled(); n != 1 {
		t.Fatalf("%d scheduled, want 1", n)
	}
	h.stop()
	if n := r.Scheduled(); n != 0 {
		t.Fatalf("%d scheduled after Forget, want 0", n)
	}
	r.Close()
	h.mu.Lock()
	r.Schedule(&h.entry, h, time.Now()) // after Close: nothing
	h.mu.Unlock()
	if n := r.Scheduled(); n != 0 {
		t.Fatalf("%d scheduled after Close, want 0", n)
	}
}

func TestPolicies(t *testing.T) {
	for _, c := range []struct{ ttl, margin time.Duration }{
		{10 * time.Millisecond, 2100 * time.Microsecond}, // TTL/100 + 2ms wins below 22 ms
		{100 * time.Millisecond, 10 * time.Millisecond},
		{30 * time.Second, 3 * time.Second},
	} {
		if got := lease.Margin(c.ttl); got != c.margin {
			t.Errorf("Margin(%v) = %v, want %v", c.ttl, got, c.margin)
		}
	}
	ttl := 3 * time.Second
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := lease.RetryBackoff(ttl, i+1); got != w*time.Millisecond {
			t.Errorf("RetryBackoff(%v, %d) = %v, want %v", ttl, i+1, got, w*time.Millisecond)
		}
	}
	var b lease.Backoff
	for i, w := range []time.Duration{20, 40, 80, 160, 320, 640, 1000, 1000} {
		if got := b.Next(); got != w*time.Millisecond {
			t.Errorf("Backoff try %d: %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if got := lease.GiveBackHorizon(time.Second, 3*time.Second); got != 3*time.Second {
		t.Errorf("GiveBackHorizon = %v, want the longer of the two", got)
	}
	if a, b := lease.NewToken(), lease.NewToken(); len(a) != 32 || a == b {
		t.Errorf("NewToken: %q, %q", a, b)
	}
}
