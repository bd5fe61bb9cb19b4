package lease_test

import (
	"context"
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
	stopped bool
}

type answer struct {
	at  time.Time
	err error
}

func (h *holder) Renewal(now time.Time) ([]lease.Part, lease.Round, bool) {
	return []lease.Part{{Lane: h.lane, Conn: h.conn, Call: node.Refresh(h.keys, h.tok, h.ttl), Bound: now.Add(h.ttl)}}, h, true
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
