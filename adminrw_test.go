package dlock_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestInspectShowsReadersAndWaiters(t *testing.T) {
	_, rdb, srv := setup(t)
	mk := func(owner string) *dlock.Client { return newLocker(t, srv.Client(t), dlock.WithDefaultOwner(owner)) }
	r1 := mustAcquire(t, mk("reader-1"), "ins", dlock.WithShared(), dlock.WithTTL(3*time.Second))
	r2 := mustAcquire(t, mk("reader-2"), "ins", dlock.WithShared(), dlock.WithTTL(5*time.Second))
	// A reader whose lease ran out holds nothing and is not shown.
	mustAcquire(t, mk("reader-gone"), "ins", dlock.WithShared(), dlock.WithTTL(200*time.Millisecond), dlock.WithoutRenewal())
	writer := acquireAsync(mk("writer"), "ins", dlock.WithWait(5*time.Second))
	waitFor(t, "writer in line", func() bool { return queued(rdb, "ins") == 1 })
	reader := acquireAsync(mk("reader-3"), "ins", dlock.WithShared(), dlock.WithWait(5*time.Second))
	waitFor(t, "reader in line", func() bool { return queued(rdb, "ins") == 2 })
	time.Sleep(300 * time.Millisecond)

	info, err := mk("viewer").Inspect(bg, "ins")
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != dlock.KindShared || info.Owner != "" || info.Fence <= r2.Fence() {
		t.Fatalf("info %+v: want kind shared, no owner, the largest reader fence", info)
	}
	if len(info.Readers) != 2 || info.Readers[0].Owner != "reader-1" || info.Readers[1].Owner != "reader-2" {
		t.Fatalf("readers %+v: want reader-1 then reader-2 (the lapsed one left out)", info.Readers)
	}
	if rd := info.Readers[1]; rd.Token != r2.Token() || rd.Fence != r2.Fence() || rd.Lease != 5*time.Second ||
		rd.TTL <= 4*time.Second || rd.Since.IsZero() {
		t.Fatalf("second reader %+v", rd)
	}
	if info.TTL < 4*time.Second {
		t.Fatalf("lock TTL %v: want the longest reader lease left", info.TTL)
	}
	if len(info.Queue) != 2 || info.Queue[0].Owner != "writer" || info.Queue[0].Shared ||
		info.Queue[1].Owner != "reader-3" || !info.Queue[1].Shared || info.Queue[0].Alive <= 0 {
		t.Fatalf("queue %+v: want the writer then reader-3", info.Queue)
	}
	list, err := mk("viewer").List(bg, "ins", 0)
	if err != nil || len(list) != 1 || len(list[0].Readers) != 2 {
		t.Fatalf("List: %+v, %v", list, err)
	}
	_ = r1.Release(bg)
	_ = r2.Release(bg)
	w := await(t, "writer", writer, 3*time.Second)
	info, err = mk("viewer").Inspect(bg, "ins")
	if err != nil || info.Kind != dlock.KindExclusive || info.Owner != "writer" || len(info.Readers) != 0 ||
		len(info.Queue) != 1 || info.Queue[0].Owner != "reader-3" {
		t.Fatalf("after the hand-off to the writer: %+v, %v", info, err)
	}
	_ = w.Release(bg)
	_ = await(t, "reader", reader, 3*time.Second).Release(bg)
}
