package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/node"
)

// queued is the number of entries in name's waiter queue.
func queued(rdb *redis.Client, name string) int64 {
	return rdb.ZCard(bg, "dlock:{"+name+"}:q").Val()
}

// notObtained fails the test unless err says the lock is busy.
func notObtained(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("%s: %v, want ErrNotObtained", what, err)
	}
}

func TestSharedReadersCoexistWriterExcludes(t *testing.T) {
	_, rdb, srv := setup(t)
	cs := newClients(t, srv, 3)
	r1 := mustAcquire(t, cs[0], "rw", dlock.WithShared(), dlock.WithTTL(5*time.Second))
	r2 := mustAcquire(t, cs[1], "rw", dlock.WithShared(), dlock.WithTTL(5*time.Second))
	if r2.Fence() <= r1.Fence() {
		t.Fatalf("reader fences %d then %d: a later grant must have a larger fence", r1.Fence(), r2.Fence())
	}
	_, err := cs[2].TryAcquire(bg, "rw")
	notObtained(t, "writer while two readers hold", err)
	var busy *dlock.NotObtainedError
	if !errors.As(err, &busy) || busy.HolderTTL < 4*time.Second {
		t.Fatalf("writer's busy reply %v: want the readers' lease left", err)
	}
	if err := r1.Release(bg); err != nil {
		t.Fatal(err)
	}
	_, err = cs[2].TryAcquire(bg, "rw")
	notObtained(t, "writer while one reader holds", err)
	if _, err := r1.TTL(bg); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("TTL of a released reader: %v", err)
	}
	if left, err := r2.TTL(bg); err != nil || left < 4*time.Second {
		t.Fatalf("TTL of the other reader: %v, %v", left, err)
	}
	if err := r2.Release(bg); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(bg, "dlock:{rw}").Val(); n != 0 {
		t.Fatalf("the last reader left, the lock key is still there")
	}
	w := mustAcquire(t, cs[2], "rw", dlock.WithTTL(5*time.Second))
	if w.Fence() <= r2.Fence() {
		t.Fatalf("writer fence %d not above the readers' %d", w.Fence(), r2.Fence())
	}
	_, err = cs[0].TryAcquire(bg, "rw", dlock.WithShared())
	notObtained(t, "reader while a writer holds", err)
	if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}
}

func TestSharedWaitingWriterBlocksNewReaders(t *testing.T) {
	_, rdb, srv := setup(t)
	cs := newClients(t, srv, 4)
	r1 := mustAcquire(t, cs[0], "wq", dlock.WithShared(), dlock.WithTTL(5*time.Second))
	writer := acquireAsync(cs[1], "wq", dlock.WithTTL(5*time.Second), dlock.WithWait(8*time.Second))
	waitFor(t, "the writer in line", func() bool { return queued(rdb, "wq") == 1 })

	_, err := cs[2].TryAcquire(bg, "wq", dlock.WithShared())
	notObtained(t, "new reader behind a waiting writer", err)
	// A waiting reader lines up behind the writer, too.
	reader := acquireAsync(cs[2], "wq", dlock.WithShared(), dlock.WithTTL(5*time.Second), dlock.WithWait(8*time.Second))
	waitFor(t, "the reader in line", func() bool { return queued(rdb, "wq") == 2 })

	// The documented way round the writer.
	skip := mustAcquire(t, cs[3], "wq", dlock.WithShared(), dlock.WithoutWriterPriority())
	if err := skip.Release(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-writer:
		t.Fatalf("writer got %v while a reader held", r)
	case r := <-reader:
		t.Fatalf("reader got %v past the waiting writer", r)
	case <-time.After(300 * time.Millisecond):
	}
	if err := r1.Release(bg); err != nil {
		t.Fatal(err)
	}
	w := await(t, "writer after the readers left", writer, 2*time.Second)
	select {
	case r := <-reader:
		t.Fatalf("reader got %v while the writer held", r)
	case <-time.After(300 * time.Millisecond):
	}
	if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}
	r := await(t, "reader after the writer left", reader, 2*time.Second)
	if r.Fence() <= w.Fence() {
		t.Fatalf("reader's fence %d not above the writer's %d", r.Fence(), w.Fence())
	}
	_ = r.Release(bg)
}

func TestSharedBatchHandOff(t *testing.T) {
	_, rdb, srv := setup(t)
	cs := newClients(t, srv, 6)
	// Every hand-off message, to count them per client.
	ps := rdb.PSubscribe(bg, "dlock:{batch}:w:*")
	defer ps.Close()
	if _, err := ps.Receive(bg); err != nil {
		t.Fatal(err)
	}
	msgs := ps.Channel()

	// A long lease: waiters wake on their own only after ~1s (waiterRenew),
	// so a grant within 300ms is the hand-off's.
	long := dlock.WithTTL(10 * time.Second)
	wait := dlock.WithWait(8 * time.Second)
	w := mustAcquire(t, cs[0], "batch", long)
	var readers []<-chan acquired
	for i, c := range cs[1:4] {
		readers = append(readers, acquireAsync(c, "batch", dlock.WithShared(), long, wait))
		waitFor(t, "reader in line", func() bool { return queued(rdb, "batch") == int64(i+1) })
	}
	writer2 := acquireAsync(cs[4], "batch", long, wait)
	waitFor(t, "second writer in line", func() bool { return queued(rdb, "batch") == 4 })
	late := acquireAsync(cs[5], "batch", dlock.WithShared(), long, wait)
	waitFor(t, "late reader in line", func() bool { return queued(rdb, "batch") == 5 })

	released := time.Now()
	if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}
	var got []dlock.Lock
	for i, r := range readers {
		l := await(t, "reader handed the lock", r, 2*time.Second)
		if d := time.Since(released); d > 300*time.Millisecond {
			t.Fatalf("reader %d got the lock %v after the release: woken by its timer, not the hand-off", i, d)
		}
		if l.Fence() <= w.Fence() {
			t.Fatalf("reader fence %d not above the writer's %d", l.Fence(), w.Fence())
		}
		got = append(got, l)
	}
	channels := map[string]int{}
	for len(channels) < 3 {
		select {
		case m := <-msgs:
			channels[m.Channel]++
			if strings.Count(m.Payload, ":") != 1 {
				t.Errorf("message %q to a client with one token", m.Payload)
			}
		case <-time.After(time.Second):
			t.Fatalf("hand-off messages: %v, want one to each of 3 clients", channels)
		}
	}
	select {
	case m := <-msgs:
		t.Fatalf("one more message %q after one per reader client", m.Payload)
	case r := <-writer2:
		t.Fatalf("second writer got %v while readers hold", r)
	case r := <-late:
		t.Fatalf("reader behind the second writer got %v", r)
	case <-time.After(200 * time.Millisecond):
	}
	for _, l := range got {
		if err := l.Release(bg); err != nil {
			t.Fatal(err)
		}
	}
	w2 := await(t, "second writer after the batch", writer2, 2*time.Second)
	if err := w2.Release(bg); err != nil {
		t.Fatal(err)
	}
	_ = await(t, "late reader", late, 2*time.Second).Release(bg)
}

// TestSharedBatchOneMessagePerClient queues two reader tokens of one client
// id through the scripts themselves (a Client lines up one token per name,
// so it cannot be made to) and checks the release tells that client once,
// of both.
func TestSharedBatchOneMessagePerClient(t *testing.T) {
	_, rdb, _ := setup(t)
	k := node.KeysOf("dlock:", "one")
	ps := rdb.PSubscribe(bg, "dlock:{one}:w:*")
	defer ps.Close()
	if _, err := ps.Receive(bg); err != nil {
		t.Fatal(err)
	}
	args := func(waiter string) node.AcquireArgs {
		return node.AcquireArgs{TTL: 5 * time.Second, Owner: "t", Waiter: waiter, Alive: 5 * time.Second,
			QueueExpiry: 6 * time.Second, FenceLifetime: time.Hour}
	}
	grant := func(token, waiter string) node.Grant {
		t.Helper()
		res, err := node.Acquire(k, token, args(waiter)).Run(bg, rdb).Slice()
		if err != nil {
			t.Fatal(err)
		}
		g, err := node.ParseGrant(res)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if g := grant("w1", ""); !g.OK {
		t.Fatal("writer not granted")
	}
	for _, tok := range []string{"Ra1", "Rb1", "Ra2"} {
		if g := grant(tok, "client-"+tok[1:2]); g.OK {
			t.Fatalf("%s granted while a writer holds", tok)
		}
	}
	res, err := node.Release(k, "w1", node.ReleaseArgs{Record: time.Second, FenceLifetime: time.Hour}).Run(bg, rdb).Int64()
	if err != nil || res != 1 {
		t.Fatalf("release: %v %v", res, err)
	}
	got := map[string]string{}
	for len(got) < 2 {
		select {
		case m := <-ps.Channel():
			if _, dup := got[m.Channel]; dup {
				t.Fatalf("second message to %s: %q", m.Channel, m.Payload)
			}
			got[m.Channel] = m.Payload
		case <-time.After(time.Second):
			t.Fatalf("messages %v, want one to each of 2 clients", got)
		}
	}
	a := strings.Split(got["dlock:{one}:w:client-a"], ";")
	if len(a) != 2 || !strings.HasPrefix(a[0], "Ra1:") || !strings.HasPrefix(a[1], "Ra2:") {
		t.Fatalf("message to client-a %q, want both its tokens in line order", got["dlock:{one}:w:client-a"])
	}
	if !strings.HasPrefix(got["dlock:{one}:w:client-b"], "Rb1:") {
		t.Fatalf("message to client-b %q", got["dlock:{one}:w:client-b"])
	}
	for _, tok := range []string{"Ra1", "Rb1", "Ra2"} {
		if left, _ := node.PTTL(k, tok).Run(bg, rdb).Int64(); left <= 0 {
			t.Fatalf("%s not a holder after the batch: pttl %d", tok, left)
		}
	}
	if n := rdb.ZCard(bg, k.Queue).Val(); n != 0 {
		t.Fatalf("%d entries left in line after the batch", n)
	}
}

func TestSharedCrashedReaderLapses(t *testing.T) {
	_, _, srv := setup(t)
	cs := newClients(t, srv, 3)
	// The crashed reader: nobody renews it, nobody releases it.
	crashed := mustAcquire(t, cs[0], "lapse", dlock.WithShared(), dlock.WithTTL(600*time.Millisecond), dlock.WithoutRenewal())
	// A live reader with a long lease, which leaves early.
	live := mustAcquire(t, cs[1], "lapse", dlock.WithShared(), dlock.WithTTL(5*time.Second))
	acquiredAt := time.Now()
	writer := acquireAsync(cs[2], "lapse", dlock.WithTTL(5*time.Second), dlock.WithWait(8*time.Second))
	time.Sleep(100 * time.Millisecond)
	if err := live.Release(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-writer:
		t.Fatalf("writer got %v while the crashed reader's lease ran", r)
	case <-time.After(300 * time.Millisecond):
	}
	// The writer gets in once that lease ends, not when the live reader's
	// longer one would have.
	w := await(t, "writer after the crashed reader's lease", writer, 2*time.Second)
	if d := time.Since(acquiredAt); d > 1500*time.Millisecond {
		t.Fatalf("writer got in %v after the crashed reader's 600ms lease began", d)
	}
	select {
	case <-crashed.Context().Done():
		if !errors.Is(context.Cause(crashed.Context()), dlock.ErrLockLost) {
			t.Fatalf("crashed reader's context ended with %v", context.Cause(crashed.Context()))
		}
	default:
		t.Fatal("crashed reader's context still live after its lease")
	}
	if err := crashed.Refresh(bg, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("refresh of the lapsed reader: %v, want ErrNotHeld", err)
	}
	_ = w.Release(bg)
}

// TestSharedExpiredReaderIsNotAHolder: a reader whose lease ran out while
// another reader keeps the key alive holds nothing: its refresh and TTL say
// so, and it cannot extend itself back in.
func TestSharedExpiredReaderIsNotAHolder(t *testing.T) {
	_, rdb, _ := setup(t)
	k := node.KeysOf("dlock:", "exp")
	a := node.AcquireArgs{TTL: 300 * time.Millisecond, Owner: "t", FenceLifetime: time.Hour}
	if res, err := node.Acquire(k, "Rshort", a).Run(bg, rdb).Slice(); err != nil || res[0] != int64(1) {
		t.Fatalf("short reader: %v %v", res, err)
	}
	a.TTL = 5 * time.Second
	if res, err := node.Acquire(k, "Rlong", a).Run(bg, rdb).Slice(); err != nil || res[0] != int64(1) {
		t.Fatalf("long reader: %v %v", res, err)
	}
	time.Sleep(450 * time.Millisecond)
	if left, err := node.PTTL(k, "Rshort").Run(bg, rdb).Int64(); err != nil || left != -1 {
		t.Fatalf("pttl of the lapsed reader: %d %v, want -1", left, err)
	}
	if ok, err := node.Refresh(k, "Rshort", time.Second).Run(bg, rdb).Int64(); err != nil || ok != 0 {
		t.Fatalf("refresh of the lapsed reader: %d %v, want 0", ok, err)
	}
	if left, _ := node.PTTL(k, "Rlong").Run(bg, rdb).Int64(); left < 4000 {
		t.Fatalf("the live reader's lease: %dms", left)
	}
	if res, _ := node.Release(k, "Rshort", node.ReleaseArgs{Record: time.Second, FenceLifetime: time.Hour}).Run(bg, rdb).Int64(); res != 0 {
		t.Fatalf("release of the lapsed reader: %d, want 0 (not held)", res)
	}
	if rdb.Exists(bg, k.Lock).Val() != 1 {
		t.Fatal("the lapsed reader's release deleted the live reader's lock")
	}
}

func TestSharedResentAcquireAndRelease(t *testing.T) {
	_, rdb, srv := setup(t)
	hook := &resender{}
	twice := srv.Client(t)
	twice.AddHook(hook)
	a := newLocker(t, twice)
	b := newLocker(t, rdb)

	r, err := a.TryAcquire(bg, "rsend", dlock.WithShared())
	if err != nil {
		t.Fatalf("re-sent shared acquire: %v", err)
	}
	if got, _ := rdb.Get(bg, "dlock:{rsend}:fence").Int64(); got != r.Fence() {
		t.Fatalf("fence counter %d, reader's fence %d: the re-send took a second fence", got, r.Fence())
	}
	fields := rdb.HKeys(bg, "dlock:{rsend}").Val()
	if n := len(slices.DeleteFunc(fields, func(f string) bool { return !strings.HasPrefix(f, "r:") })); n != 1 {
		t.Fatalf("%d reader fields after one re-sent acquire: %v", n, fields)
	}

	// A re-sent release with a writer taking the lock between the two
	// sends: success, and the writer keeps its lock.
	var w dlock.Lock
	takeOver := func() {
		var err error
		if w, err = b.TryAcquire(bg, "rsend"); err != nil {
			t.Errorf("writer between the two sends: %v", err)
		}
	}
	hook.between.Store(&takeOver)
	if err := r.Release(bg); err != nil {
		t.Fatalf("re-sent shared release reported %v", err)
	}
	hook.between.Store(nil)
	if w == nil {
		t.FailNow()
	}
	if got := rdb.HGet(bg, "dlock:{rsend}", "token").Val(); got != w.Token() {
		t.Fatalf("re-sent release touched the writer's lock")
	}
	if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}

	// Two readers; one's release is sent twice: the other stays a holder.
	r1, err := a.TryAcquire(bg, "rsend", dlock.WithShared())
	if err != nil {
		t.Fatal(err)
	}
	r2 := mustAcquire(t, b, "rsend", dlock.WithShared())
	if err := r1.Release(bg); err != nil {
		t.Fatalf("re-sent release: %v", err)
	}
	if _, err := r2.TTL(bg); err != nil {
		t.Fatalf("other reader after a re-sent release: %v", err)
	}
	_, err = b.TryAcquire(bg, "rsend")
	notObtained(t, "writer while the other reader holds", err)
}

// TestSharedStaleBatchMessageIgnored publishes, to a waiting reader, a batch
// message with its token and a fence not above the fence its last busy reply
// showed: a hand-off from before that attempt, lost since. The waiter must
// not take it for the lock.
func TestSharedStaleBatchMessageIgnored(t *testing.T) {
	c, rdb, srv := setup(t)
	w := mustAcquire(t, c, "stale", dlock.WithTTL(5*time.Second))
	reader := newClients(t, srv, 1)[0]
	res := acquireAsync(reader, "stale", dlock.WithShared(), dlock.WithTTL(5*time.Second), dlock.WithWait(8*time.Second))
	waitFor(t, "reader in line", func() bool { return queued(rdb, "stale") == 1 })
	tok := rdb.ZRange(bg, "dlock:{stale}:q", 0, 0).Val()[0]
	id, _, _ := strings.Cut(rdb.HGet(bg, "dlock:{stale}:qd", tok).Val(), "|")
	msg := "Rother:" + strconv.FormatInt(w.Fence()+1, 10) + ";" + tok + ":" + strconv.FormatInt(w.Fence(), 10)
	if n := rdb.Publish(bg, "dlock:{stale}:w:"+id, msg).Val(); n != 1 {
		t.Fatalf("stale message reached %d subscribers", n)
	}
	select {
	case r := <-res:
		t.Fatalf("reader took a stale batch message for the lock: %v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}
	l := await(t, "reader after the release", res, 2*time.Second)
	if l.Fence() <= w.Fence() {
		t.Fatalf("reader's fence %d", l.Fence())
	}
	_ = l.Release(bg)
}

// TestSharedBatchTwoReadersOfOneClient: two readers of one Client and one of
// another wait behind a writer, and a second writer waits behind them. The
// release lets all three readers in at once, with ONE message to the client
// of the two, naming both tokens; the second writer still waits.
func TestSharedBatchTwoReadersOfOneClient(t *testing.T) {
	_, rdb, srv := setup(t)
	cs := newClients(t, srv, 4)
	ps := rdb.PSubscribe(bg, "dlock:{two}:w:*")
	defer ps.Close()
	if _, err := ps.Receive(bg); err != nil {
		t.Fatal(err)
	}
	msgs := ps.Channel()
	long, wait := dlock.WithTTL(10*time.Second), dlock.WithWait(8*time.Second)
	w := mustAcquire(t, cs[0], "two", long)
	a1 := acquireAsync(cs[1], "two", dlock.WithShared(), long, wait)
	waitFor(t, "first reader in line", func() bool { return queued(rdb, "two") == 1 })
	a2 := acquireAsync(cs[1], "two", dlock.WithShared(), long, wait)
	// A reader of the same client lines up in Redis too (give it 1s).
	for deadline := time.Now().Add(time.Second); queued(rdb, "two") < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	n := queued(rdb, "two")
	b1 := acquireAsync(cs[2], "two", dlock.WithShared(), long, wait)
	waitFor(t, "other client's reader in line", func() bool { return queued(rdb, "two") == n+1 })
	w2 := acquireAsync(cs[3], "two", long, wait)
	waitFor(t, "second writer in line", func() bool { return queued(rdb, "two") == n+2 })

	released := time.Now()
	if err := w.Release(bg); err != nil {
		t.Fatal(err)
	}
	var got []dlock.Lock
	for i, r := range []<-chan acquired{a1, a2, b1} {
		select {
		case res := <-r:
			if res.err != nil {
				t.Fatalf("reader %d: %v", i, res.err)
			}
			got = append(got, res.l)
		case <-time.After(300*time.Millisecond - time.Since(released)):
			t.Fatalf("reader %d not let in by the release within 300ms (%d in line before it)", i, n)
		}
	}
	perClient := map[string][]string{}
	for len(perClient) < 2 {
		select {
		case m := <-msgs:
			perClient[m.Channel] = append(perClient[m.Channel], m.Payload)
		case <-time.After(time.Second):
			t.Fatalf("messages %v", perClient)
		}
	}
	for ch, ps := range perClient {
		if len(ps) != 1 {
			t.Fatalf("%d messages to %s: %q", len(ps), ch, ps)
		}
	}
	var two int
	for _, ps := range perClient {
		if strings.Count(ps[0], ";") == 1 {
			two++
		}
	}
	if two != 1 {
		t.Fatalf("messages %v: want one naming both readers of one client", perClient)
	}
	select {
	case r := <-w2:
		t.Fatalf("second writer got %v while readers hold", r)
	case <-time.After(100 * time.Millisecond):
	}
	for _, l := range got {
		_ = l.Release(bg)
	}
	_ = await(t, "second writer", w2, 2*time.Second).Release(bg)
}
