package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// ownerClient is a library client whose locks show owner.
func ownerClient(t *testing.T, rdb redis.UniversalClient, owner string) *dlock.Client {
	t.Helper()
	c, err := dlock.New(rdb, dlock.WithDefaultOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// acquireLater starts an Acquire that waits in line; its lock comes on the
// channel.
func acquireLater(t *testing.T, c *dlock.Client, name string, opts ...dlock.AcquireOption) <-chan dlock.Lock {
	t.Helper()
	got := make(chan dlock.Lock, 1)
	go func() {
		l, err := c.Acquire(context.Background(), name, append(opts, dlock.WithWait(20*time.Second), dlock.WithTTL(5*time.Second))...)
		if err != nil {
			t.Errorf("Acquire %s: %v", name, err)
		}
		got <- l
	}()
	return got
}

func receive(t *testing.T, ch <-chan dlock.Lock) dlock.Lock {
	t.Helper()
	select {
	case l := <-ch:
		if l == nil {
			t.FailNow()
		}
		return l
	case <-time.After(15 * time.Second):
		t.Fatal("no lock within 15s")
		return nil
	}
}

// expectLine reads lines until one contains every part, failing after 10s.
// It returns the lines read, that one last.
func expectLine(t *testing.T, b *background, lines <-chan string, parts ...string) []string {
	t.Helper()
	var seen []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		line := nextLine(t, b, lines, time.Until(deadline))
		seen = append(seen, line)
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return seen
		}
	}
	t.Fatalf("no line with %q; got %q", parts, seen)
	return nil
}

// A holder, a writer and a reader waiting behind it, hand-offs down the
// line, then free: each change is one line with owners, kinds and fences,
// and no line repeats the one before it.
func TestWatchText(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	alice, bob, carol := ownerClient(t, rdb, "alice"), ownerClient(t, rdb, "bob"), ownerClient(t, rdb, "carol")
	const name = "watched"
	b, lines := startLines(t, srv, "watch", "--interval", "50ms", name)
	var all []string
	all = append(all, expectLine(t, b, lines, `"watched" free`)...)

	la, err := alice.Acquire(context.Background(), name, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, expectLine(t, b, lines, `exclusive "alice" fence `+itoa(la.Fence()))...)
	bobGot := acquireLater(t, bob, name)
	all = append(all, expectLine(t, b, lines, `exclusive "alice"`, `; 1 waiting: "bob" (exclusive)`)...)
	carolGot := acquireLater(t, carol, name, dlock.WithShared())
	all = append(all, expectLine(t, b, lines, `exclusive "alice"`, `; 2 waiting: "bob" (exclusive), "carol" (shared)`)...)

	if err := la.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	lb := receive(t, bobGot)
	all = append(all, expectLine(t, b, lines, `exclusive "bob" fence `+itoa(lb.Fence()), `; 1 waiting: "carol" (shared)`)...)
	if err := lb.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	lc := receive(t, carolGot)
	all = append(all, expectLine(t, b, lines, `shared 1 reader: "carol" fence `+itoa(lc.Fence()))...)
	if err := lc.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	all = append(all, expectLine(t, b, lines, `"watched" free`)...)

	for i := 1; i < len(all); i++ {
		if state(all[i]) == state(all[i-1]) {
			t.Errorf("line %d repeats the one before: %q", i, all[i])
		}
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code := b.wait(t, 10*time.Second); code != exitOK {
		t.Fatalf("exit %d after SIGTERM; stderr: %s", code, b.stderr.String())
	}
}

// state is a text line without its time.
func state(line string) string {
	_, s, _ := strings.Cut(line, " ")
	return s
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// -o json: one object a line, a semaphore's permits and its line of waiters
// with their owners.
func TestWatchJSONSemaphore(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	alice, bob, carol := ownerClient(t, rdb, "alice"), ownerClient(t, rdb, "bob"), ownerClient(t, rdb, "carol")
	const name = "pool"
	b, lines := startLines(t, srv, "watch", "-o", "json", "--interval", "50ms", name)
	next := func() watchEvent {
		t.Helper()
		var ev watchEvent
		line := nextLine(t, b, lines, 10*time.Second)
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Name != name || ev.Time.IsZero() {
			t.Fatalf("line %q: %v; want a watch event of %s", line, err, name)
		}
		return ev
	}
	if ev := next(); ev.Held || ev.Lock != nil {
		t.Fatalf("first event %+v, want free", ev)
	}
	sem := []dlock.AcquireOption{dlock.WithPermits(2), dlock.WithTTL(5 * time.Second)}
	la, err := alice.Acquire(context.Background(), name, sem...)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := bob.Acquire(context.Background(), name, sem...)
	if err != nil {
		t.Fatal(err)
	}
	carolGot := acquireLater(t, carol, name, dlock.WithPermits(2))
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev := next()
		if ev.Lock != nil && len(ev.Lock.Holders) == 2 && len(ev.Lock.Queue) == 1 {
			if ev.Lock.Kind != "semaphore" || ev.Lock.Permits != 2 || ev.Lock.Queue[0].Owner != "carol" ||
				ev.Lock.Holders[0].Owner+ev.Lock.Holders[1].Owner != "alicebob" && ev.Lock.Holders[0].Owner+ev.Lock.Holders[1].Owner != "bobalice" {
				t.Fatalf("event %+v: want permits of alice and bob, carol waiting", *ev.Lock)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no event with two permits held and carol waiting")
		}
	}
	_ = la.Release(context.Background())
	lc := receive(t, carolGot)
	_ = lb.Release(context.Background())
	_ = lc.Release(context.Background())
	for ev := next(); ev.Held; ev = next() {
		if time.Now().After(deadline) {
			t.Fatal("no free event after every permit came back")
		}
	}
	_ = b.cmd.Process.Signal(syscall.SIGINT)
	if code := b.wait(t, 10*time.Second); code != exitOK {
		t.Fatalf("exit %d after SIGINT; stderr: %s", code, b.stderr.String())
	}
}

func TestWatchUsage(t *testing.T) {
	srv := redistest.Start(t)
	for _, args := range [][]string{
		{"watch"},
		{"watch", "a", "b"},
		{"watch", "--interval", "0s", "a"},
		{"watch", "-o", "yaml", "a"},
		{"watch", ""},
	} {
		if r := dlockRun(t, srv, args...); r.code != exitUsage {
			t.Errorf("dlock %q: exit %d, want %d; stderr: %s", args, r.code, exitUsage, r.stderr)
		}
	}
}

// Redis going away does not end watch: it says so once, polls on, and
// follows the lock again once Redis is back.
func TestWatchSurvivesRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	b, lines := startLines(t, srv, "watch", "--interval", "50ms", "--timeout", "300ms", "comeback")
	expectLine(t, b, lines, `"comeback" free`)
	srv.Kill()
	waitFor(t, "watch to report Redis gone", func() bool { return strings.Contains(liveStderr(b), "polling on") })
	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "watch to report Redis back", func() bool { return strings.Contains(liveStderr(b), "answers again") })
	if n := strings.Count(liveStderr(b), "polling on"); n != 1 {
		t.Errorf("the outage reported %d times, want once:\n%s", n, liveStderr(b))
	}
	l, err := ownerClient(t, srv.Client(t), "after").Acquire(context.Background(), "comeback", dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	expectLine(t, b, lines, `exclusive "after" fence `+itoa(l.Fence()))
	_ = l.Release(context.Background())
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code := b.wait(t, 10*time.Second); code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, b.stderr.String())
	}
}

// With keyspace notifications on, watch sees a change at once, not at its
// next poll: the interval here is far longer than the test waits.
func TestWatchKeyspaceNotifications(t *testing.T) {
	srv := redistest.Start(t, "--notify-keyspace-events", "KA")
	const name = "notified*[x]" // glob characters, escaped in the pattern
	b, lines := startLines(t, srv, "watch", "--interval", "1m", name)
	if line := nextLine(t, b, lines, 10*time.Second); !strings.Contains(line, "free") {
		t.Fatalf("first line %q, want free", line)
	}
	c := ownerClient(t, srv.Client(t), "quick")
	// The subscription is set up after the first poll: wait until it is.
	waitFor(t, "watch's PSUBSCRIBE", func() bool {
		return srv.Client(t).PubSubNumPat(context.Background()).Val() == 1
	})
	l, err := c.Acquire(context.Background(), name, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if line := nextLine(t, b, lines, 3*time.Second); !strings.Contains(line, `exclusive "quick" fence `+itoa(l.Fence())) {
		t.Fatalf("line %q, want the new holder", line)
	}
	_ = l.Release(context.Background())
	if line := nextLine(t, b, lines, 3*time.Second); !strings.Contains(line, "free") {
		t.Fatalf("line %q, want free", line)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	if code := b.wait(t, 10*time.Second); code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, b.stderr.String())
	}
}

func TestGlobEscape(t *testing.T) {
	if got, want := globEscape(`dlock:{a*b?[c]\}`), `dlock:{a\*b\?\[c\]\\}`; got != want {
		t.Fatalf("globEscape = %q, want %q", got, want)
	}
}

// In a Cluster the subscription goes to the lock's node, where its
// notifications are.
func TestWatchKeyspaceNotificationsCluster(t *testing.T) {
	cs := redistest.StartCluster(t, redistest.WithReplicas(0), redistest.WithServerArgs("--notify-keyspace-events", "KA"))
	var conn []string
	for _, a := range cs.Addrs {
		conn = append(conn, "--addr", a)
	}
	cc := cs.ClusterClient(t)
	c := ownerClient(t, cc, "clustered")
	for _, name := range []string{"n1", "n2", "n3", "n4"} { // over several nodes
		b, lines := startLines(t, nil, append(conn, "watch", "--interval", "1m", name)...)
		if line := nextLine(t, b, lines, 10*time.Second); !strings.Contains(line, "free") {
			t.Fatalf("first line %q, want free", line)
		}
		node, err := cc.MasterForKey(context.Background(), lockKey(name))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "watch's PSUBSCRIBE on the lock's node", func() bool {
			return node.PubSubNumPat(context.Background()).Val() == 1
		})
		l, err := c.Acquire(context.Background(), name, dlock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if line := nextLine(t, b, lines, 3*time.Second); !strings.Contains(line, `exclusive "clustered" fence `+itoa(l.Fence())) {
			t.Fatalf("%s: line %q, want the new holder", name, line)
		}
		_ = l.Release(context.Background())
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		b.wait(t, 10*time.Second)
	}
}
