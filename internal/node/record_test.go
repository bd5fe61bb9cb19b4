package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestRecordKinds: the records a release leaves per token, and which later
// attempts of the token they refuse. A withdrawn attempt ('w') refuses a
// plain attempt (a copy of it re-sent by go-redis after the withdrawal) but
// not a Redlock renewal's re-take; a lock that ended or was forced refuses
// both; and a record never steps down (a late withdrawal after the lock
// ended, or a give-up after a forced unlock).
func TestRecordKinds(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	const tok = "tok"
	attempt := func(t *testing.T, k node.Keys, retake bool) bool {
		t.Helper()
		res, err := node.Acquire(k, tok, node.AcquireArgs{TTL: time.Second, FenceLifetime: time.Hour, Retake: retake}).Run(ctx, rdb).Slice()
		if err != nil {
			t.Fatal(err)
		}
		g, err := node.ParseGrant(res)
		if err != nil {
			t.Fatal(err)
		}
		return g.OK
	}
	release := func(t *testing.T, k node.Keys, a node.ReleaseArgs) int64 {
		t.Helper()
		a.FenceLifetime = time.Hour
		n, err := node.Release(k, tok, a).Run(ctx, rdb).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	const rec = 30 * time.Second
	withdraw := node.ReleaseArgs{Record: rec, Withdraw: true}
	giveUp := node.ReleaseArgs{Record: rec, GiveUp: true}
	forced := node.ReleaseArgs{Record: rec, Forced: true}

	t.Run("withdrawn", func(t *testing.T) {
		k := node.KeysOf("test:", "withdrawn")
		if !attempt(t, k, false) {
			t.Fatal("first attempt refused")
		}
		if n := release(t, k, withdraw); n != 1 {
			t.Fatalf("withdrawal of a grant = %d, want 1 (freed)", n)
		}
		if attempt(t, k, false) {
			t.Error("a copy of the withdrawn attempt granted")
		}
		if !attempt(t, k, true) {
			t.Error("a re-take of the live lock refused after a withdrawn attempt")
		}
		// The re-take's grant is the lock's: its release is a release.
		if n := release(t, k, node.ReleaseArgs{Record: rec}); n != 1 {
			t.Fatalf("release after the re-take = %d, want 1", n)
		}
		if attempt(t, k, true) {
			t.Error("a re-take granted after the lock was released")
		}
	})
	t.Run("withdrawal after the end", func(t *testing.T) {
		k := node.KeysOf("test:", "late")
		if n := release(t, k, giveUp); n != 2 {
			t.Fatalf("give-up on nothing = %d, want 2", n)
		}
		release(t, k, withdraw) // late: must not step the record down
		if attempt(t, k, true) {
			t.Error("a re-take granted: a late withdrawal turned an ended lock into a withdrawn attempt")
		}
	})
	t.Run("forced", func(t *testing.T) {
		k := node.KeysOf("test:", "forced")
		if !attempt(t, k, false) {
			t.Fatal("first attempt refused")
		}
		if n := release(t, k, forced); n != 1 {
			t.Fatalf("forced unlock = %d, want 1", n)
		}
		if attempt(t, k, true) || attempt(t, k, false) {
			t.Error("a forced unlock was undone by an attempt of the token")
		}
		if n := release(t, k, node.ReleaseArgs{Record: rec}); n != 0 {
			t.Errorf("the holder's own release after a forced unlock = %d, want 0 (not ours)", n)
		}
		release(t, k, giveUp) // must not step the record down
		if n := release(t, k, node.ReleaseArgs{Record: rec}); n != 0 {
			t.Errorf("release after a give-up of a forced token = %d, want 0 (not ours)", n)
		}
		if v := rdb.Get(ctx, k.Record+tok).Val(); v != "f" {
			t.Errorf("record = %q, want f", v)
		}
	})
}
