package dlock

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/inspect"
	"github.com/dlock-go/dlock/internal/node"
)

// Kinds of lock, in inspect.LockInfo.Kind and NotObtainedError.Kind.
const (
	KindExclusive = "exclusive" // one holder (an acquisition without WithShared)
	KindShared    = "shared"    // readers (WithShared)
	KindSemaphore = "semaphore" // permits of a name (WithPermits)
)

// maxQueueShown bounds inspect.LockInfo.Queue: an operator reads the head of a line;
// Waiters has its length.
const maxQueueShown = 100

// sharedInfo fills in a read-held lock's readers from its hash f (see the
// reader layout in internal/scripts/common.lua), leaving out readers whose
// lease is over at the server's time now.
func sharedInfo(i *inspect.LockInfo, f map[string]string, now time.Time) {
	i.Kind, i.Owner, i.Since, i.Lease = KindShared, "", time.Time{}, 0
	for field, v := range f {
		token, ok := strings.CutPrefix(field, "r:")
		if !ok {
			continue
		}
		parts := strings.SplitN(v, "|", 5)
		if len(parts) != 5 {
			continue
		}
		exp, _ := strconv.ParseInt(parts[0], 10, 64)
		ttl, _ := strconv.ParseInt(parts[1], 10, 64)
		since, _ := strconv.ParseInt(parts[2], 10, 64)
		fence, _ := strconv.ParseInt(parts[3], 10, 64)
		left := time.UnixMilli(exp).Sub(now)
		if left <= 0 {
			continue
		}
		r := inspect.ReaderInfo{Owner: parts[4], Token: token, Fence: fence, Since: time.UnixMilli(since),
			Lease: time.Duration(ttl) * time.Millisecond, TTL: left.Truncate(time.Millisecond)}
		i.Readers = append(i.Readers, r)
		if i.Since.IsZero() || r.Since.Before(i.Since) {
			i.Since = r.Since
		}
	}
	// Fences grow in grant order; since has whole ms only.
	slices.SortFunc(i.Readers, func(a, b inspect.ReaderInfo) int { return cmp.Compare(a.Fence, b.Fence) })
}

// queueOf reads the waiters in line (tokens in queue order, data the waiter
// data hash; see acquire.lua), leaving out entries no longer alive at the
// server's time now, which a hand-off skips.
func queueOf(tokens []string, data map[string]string, now time.Time) []inspect.WaiterInfo {
	var q []inspect.WaiterInfo
	for _, t := range tokens {
		parts := strings.SplitN(data[t], "|", 4)
		if len(parts) != 4 {
			continue
		}
		alive, _ := strconv.ParseInt(parts[2], 10, 64)
		left := time.UnixMilli(alive).Sub(now)
		if left < 0 {
			continue
		}
		q = append(q, inspect.WaiterInfo{Owner: parts[3], Token: t, Shared: node.IsShared(t), Alive: left.Truncate(time.Millisecond)})
	}
	return q
}

// readBy reports whether token is one of the live readers of i.
func readBy(i inspect.LockInfo, token string) bool {
	return slices.ContainsFunc(i.Readers, func(r inspect.ReaderInfo) bool { return r.Token == token })
}
