package node_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/node"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestMergedRefreshesAnswerEachLock: refreshes merged into RefreshMany
// calls (here 150 of them: three calls, of 64, 64 and 22) are each answered
// as if they had gone alone: 1 and a longer lease for a lock still ours, 0
// for one another token took over, its own WRONGTYPE for a key holding a
// string, and the calls that cannot merge (a reader's refresh, a PTTL)
// answered in place; after SCRIPT FLUSH too, when every call goes again
// with its source.
func TestMergedRefreshesAnswerEachLock(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	const n = 150
	const wrong, taken = 7, 70
	keys := make([]node.Keys, n)
	for i := range n {
		keys[i] = node.KeysOf("test:", "many-"+strconv.Itoa(i))
		g, err := grantOf(node.Acquire(keys[i], "tok-"+strconv.Itoa(i), node.AcquireArgs{TTL: time.Second, Alive: time.Second, QueueExpiry: time.Second, FenceLifetime: time.Hour}).Run(ctx, rdb))
		if err != nil || !g.OK {
			t.Fatalf("acquire %d: %+v, %v", i, g, err)
		}
	}
	rk := node.KeysOf("test:", "many-read")
	reader := node.SharedPrefix + strings.Repeat("ab", 16)
	if g, err := grantOf(node.Acquire(rk, reader, node.AcquireArgs{TTL: time.Second, Alive: time.Second, QueueExpiry: time.Second, FenceLifetime: time.Hour}).Run(ctx, rdb)); err != nil || !g.OK {
		t.Fatalf("reader: %+v, %v", g, err)
	}
	if err := rdb.Del(ctx, keys[wrong].Lock).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, keys[wrong].Lock, "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, keys[taken].Lock, "token", "someone-else").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	var calls []node.Call
	for i := range n {
		calls = append(calls, node.Refresh(keys[i], "tok-"+strconv.Itoa(i), 5*time.Second))
		switch i {
		case 40:
			calls = append(calls, node.Refresh(rk, reader, 5*time.Second))
		case 100:
			calls = append(calls, node.PTTL(keys[0], "tok-0"))
		}
	}
	m := node.Merge(calls)
	if len(m.Calls) != 5 {
		t.Fatalf("%d calls merged into %d, want 5 (three RefreshMany, the reader's refresh, the PTTL)", len(calls), len(m.Calls))
	}
	replies := m.Split(ctx, node.Pipeline(ctx, rdb, m.Calls, nil))
	if len(replies) != len(calls) {
		t.Fatalf("%d replies for %d calls", len(replies), len(calls))
	}
	i := 0 // the lock of the next refresh
	for c, r := range replies {
		switch {
		case c == 41: // the reader's refresh
			if v, err := r.Int64(); err != nil || v != 1 {
				t.Fatalf("reader's refresh: %d, %v; want 1", v, err)
			}
			continue
		case c == 102: // the PTTL, between locks 100 and 101
			if v, err := r.Int64(); err != nil || v < 4000 {
				t.Fatalf("PTTL in place: %d, %v; want lock 0's renewed lease", v, err)
			}
			continue
		}
		v, err := r.Int64()
		pttl := rdb.PTTL(ctx, keys[i].Lock).Val()
		switch i {
		case wrong:
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("refresh of the string key: %d, %v; want its WRONGTYPE", v, err)
			}
		case taken:
			if err != nil || v != 0 || pttl > time.Second {
				t.Fatalf("refresh of the taken lock: %d, %v, pttl %v; want 0 and its lease untouched", v, err, pttl)
			}
		default:
			if err != nil || v != 1 || pttl < 4*time.Second {
				t.Fatalf("refresh %d: %d, %v, pttl %v; want 1 and a 5s lease", i, v, err, pttl)
			}
		}
		i++
	}
	if i != n {
		t.Fatalf("%d refreshes answered, want %d", i, n)
	}
	if got := rdb.Get(ctx, keys[wrong].Lock).Val(); got != "not a lock" {
		t.Fatalf("the string key became %q", got)
	}
}

// TestMergeLeavesALoneRefresh: one refresh among other calls, or alone,
// is not worth a RefreshMany: the calls go as they are.
func TestMergeLeavesALoneRefresh(t *testing.T) {
	k := node.KeysOf("test:", "alone")
	calls := []node.Call{node.PTTL(k, "tok"), node.Refresh(k, "tok", time.Second)}
	if m := node.Merge(calls); len(m.Calls) != 2 {
		t.Fatalf("%d calls, want the 2 given", len(m.Calls))
	}
}

// grantOf parses an acquire call's reply.
func grantOf(cmd interface{ Slice() ([]any, error) }) (node.Grant, error) {
	res, err := cmd.Slice()
	if err != nil {
		return node.Grant{}, err
	}
	return node.ParseGrant(res)
}
