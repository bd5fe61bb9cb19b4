package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/redlock"
)

// refusedSeen counts the commands a refused connection failed.
type refusedSeen struct{ n atomic.Int64 }

func (o *refusedSeen) DialHook(next redis.DialHook) redis.DialHook { return next }
func (o *refusedSeen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && strings.Contains(err.Error(), "connection refused") {
			o.n.Add(1)
		}
		return err
	}
}
func (o *refusedSeen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A quorum out of reach for a moment (the nodes down, then back with their
// data) does not end a wait that still has time: the waiter gets the lock
// once the nodes are back and the holder releases. All three go down: with
// two, an attempt whose busy reply came in before the second refusal
// counted as busy, and waited on even before waits rode out outages. Nodes
// demoted to replicas would not do either: a Redlock attempt on a busy
// lock writes nothing, so READONLY never comes.
func TestWaitRidesOutQuorumOutage(t *testing.T) {
	// Every write on disk before its reply: a restarted node has the
	// holder's lock as it was.
	srvs := redistest.StartPrimaries(t, 3, "--appendonly", "yes", "--appendfsync", "always")
	seen := &refusedSeen{}
	clients := func(hook redis.Hook) []redis.UniversalClient {
		rdbs := make([]redis.UniversalClient, len(srvs))
		for i, s := range srvs {
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			if hook != nil {
				rdb.AddHook(hook)
			}
			t.Cleanup(func() { _ = rdb.Close() })
			rdbs[i] = rdb
		}
		return rdbs
	}
	holderR := newRedlock(t, clients(nil))
	waiterR := newRedlock(t, clients(seen))
	holder, err := holderR.Acquire(bg, "outage", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var waiter dlock.Lock
	go func() {
		l, err := waiterR.Acquire(bg, "outage", dlock.WithTTL(2*time.Second), dlock.WithWait(20*time.Second))
		waiter = l
		got <- err
	}()
	for _, s := range srvs {
		s.Kill()
	}
	waitFor(t, "the waiter's attempts to fail on the nodes that are down", func() bool {
		select {
		case err := <-got:
			t.Fatalf("the wait ended during the outage, with 20s to wait: %v", err)
		default:
		}
		return seen.n.Load() >= 9 // three attempts, each on every node
	})
	for _, s := range srvs {
		if err := s.Restart(bg); err != nil {
			t.Fatal(err)
		}
	}
	if err := holder.Release(bg); err != nil {
		t.Fatalf("the holder's release after the outage: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter, whose wait had time left, did not get the lock: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter did not get the released lock within 15s")
	}
	if err := waiter.Release(bg); err != nil {
		t.Fatal(err)
	}
}

// A wait that a quorum outage outlasts ends when its time is up, matching
// ErrNotObtained, ErrNoQuorum and ErrUnavailable.
func TestWaitEndedInQuorumOutageSaysBoth(t *testing.T) {
	srvs, rdbs := startNodes(t, 3)
	r := newRedlock(t, rdbs)
	srvs[1].Kill()
	srvs[2].Kill()
	start := time.Now()
	_, err := r.Acquire(bg, "outage", dlock.WithTTL(2*time.Second), dlock.WithWait(time.Second))
	took := time.Since(start)
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	for _, want := range []error{dlock.ErrNotObtained, redlock.ErrNoQuorum, dlock.ErrUnavailable} {
		if !errors.Is(err, want) {
			t.Errorf("Acquire = %v; does not match %v", err, want)
		}
	}
	if took < time.Second {
		t.Fatalf("the wait ended after %v, before its 1s", took)
	}
}

// lateReplies holds back every reply of a node by delay, after the command
// ran: the node answers after the others.
type lateReplies struct{ delay time.Duration }

func (h lateReplies) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h lateReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		time.Sleep(h.delay)
		return err
	}
}
func (h lateReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A failure that no wait cures (the lock's key of the wrong type on too
// many nodes for a quorum) ends a wait at once, also when the replies that
// make it so come after the attempt's verdict: node 2 read-only and node 0's
// WRONGTYPE decide the attempt (an outage, with node 1 still able to
// grant, as far as the verdict knows); node 1's WRONGTYPE comes later, and
// with it no quorum can ever grant. Counting only the replies in at the
// verdict waited out the whole 5 s, attempt after attempt.
func TestWaitEndsOnLateLastingErrors(t *testing.T) {
	srvs := redistest.StartPrimaries(t, 3)
	rdbs := make([]redis.UniversalClient, len(srvs))
	for i, s := range srvs {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		// Node 0 answers 20ms late, node 1 100ms late: after the
		// verdict, which node 2's refusal and node 0's reply make.
		rdb.AddHook(lateReplies{delay: []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 0}[i]})
		t.Cleanup(func() { _ = rdb.Close() })
		rdbs[i] = rdb
	}
	r := newRedlock(t, rdbs)
	// The scripts loaded on every node first: a NOSCRIPT reply, late too,
	// would send the script again after the verdict cancelled the call.
	warm, err := r.Acquire(bg, "warm", dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(bg); err != nil {
		t.Fatal(err)
	}
	// Node 2 a replica (of nothing): its writes fail at once with
	// READONLY, an outage. (A dead node's refusal comes after go-redis'
	// dial retries, later than the others.)
	if err := srvs[2].Client(t).ReplicaOf(bg, "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	// With a short TTL the backoff between attempts (a tenth of it) is
	// shorter than node 1's lateness: its reply comes during the next
	// attempt, and must end the wait all the same.
	for _, ttl := range []time.Duration{2 * time.Second, 300 * time.Millisecond} {
		name := "typed-" + ttl.String()
		key := node.KeysOf(dlock.DefaultPrefix, name).Lock
		for _, s := range srvs[:2] {
			if err := s.Client(t).Set(bg, key, "a string", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		_, err = r.Acquire(bg, name, dlock.WithTTL(ttl), dlock.WithWait(5*time.Second))
		took := time.Since(start)
		t.Logf("TTL %v: after %v: %v", ttl, took.Round(time.Millisecond), err)
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("TTL %v: Acquire = %v; want the nodes' WRONGTYPE", ttl, err)
		}
		if errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("TTL %v: Acquire = %v; a lock no wait can get is no busy lock (ErrNotObtained)", ttl, err)
		}
		if took > 2*time.Second {
			t.Errorf("TTL %v: the wait went on for %v on errors no wait cures", ttl, took.Round(time.Millisecond))
		}
	}
}

// firstRaisesSlow holds the first fence write-back a node gets (the
// acquisition's second round) for d, or until its context ends: a node
// stopped for a moment mid-round. Later write-backs go through at once; n
// counts them all.
type firstRaisesSlow struct {
	n atomic.Int64
	d time.Duration
}

func (h *firstRaisesSlow) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *firstRaisesSlow) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// evalsha only: go-redis follows a NOSCRIPT with an eval, which
		// must not be counted a second time.
		if a := cmd.Args(); len(a) == 8 && a[0] == "evalsha" && fmt.Sprint(a[2]) == "2" && h.n.Add(1) == 1 {
			select {
			case <-time.After(h.d):
			case <-ctx.Done():
			}
		}
		return next(ctx, cmd)
	}
}

func (h *firstRaisesSlow) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A wait whose attempt ran out of validity while its fence was written
// (two of three nodes slow for that round: stopped, or killed and back)
// rides it out as an outage and takes the lock on a later attempt, instead
// of ending with its time left (the torture suite's redlock-5 row caught it
// 770 ms into a 2 s wait).
func TestWaitRidesOutLateFenceRound(t *testing.T) {
	_, rdbs := startNodes(t, 3)
	const name = "late-fence"
	// Node 0's counter ahead: a quorum with node 0 in it has node 0's
	// fence, which nodes 1 and 2 must be raised to (the second round); one
	// of nodes 1 and 2 alone has a fence of its own.
	ahead := time.Now().Add(time.Hour).UnixMicro()
	if err := rdbs[0].Set(bg, "dlock:{"+name+"}:fence", strconv.FormatInt(ahead, 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	slow := []*firstRaisesSlow{{d: 3 * time.Second}, {d: 3 * time.Second}}
	rdbs[1].AddHook(slow[0])
	rdbs[2].AddHook(slow[1])
	r := newRedlock(t, rdbs)
	l, err := r.Acquire(bg, name, dlock.WithTTL(600*time.Millisecond), dlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("the wait ended on a fence round that ran late once (write-backs sent: %d, %d): %v",
			slow[0].n.Load(), slow[1].n.Load(), err)
	}
	defer l.Release(bg)
	// A write-back held is a round run late (3 s against a 600 ms
	// validity), which the wait rode out. Which node's it was depends on
	// which replies made the first quorum: a later attempt may find that
	// node raised by then (the held write-back landed) and need none.
	if slow[0].n.Load() == 0 && slow[1].n.Load() == 0 {
		t.Fatal("the lock came without a fence write-back to node 1 or 2: the late round was not forced")
	}
}
