package node

import (
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
)

// SemPrefix starts the token of every semaphore permit. Lock tokens are
// hex, so the prefix alone tells Acquire, Refresh, Release and PTTL which
// scripts and keys a token's calls take, and the client machinery (waiting,
// renewal, lease deadline, give-back) stays one for both kinds.
const SemPrefix = "S"

// IsSem reports whether token is a semaphore permit's.
func IsSem(token string) bool { return KindOf(token) == Permit }

// SemKeys are the semaphore's own keys under the name's hash tag, apart from
// the exclusive lock's hash. They are built on the semaphore's calls only,
// so KeysOf, on every exclusive acquisition, costs nothing more.
type SemKeys struct {
	Permits string // zset: permit token -> end of its lease (server ms)
	Data    string // hash: "n" -> agreed n; token -> "fence|since|ttl|owner"
	Queue   string // zset of waiter tokens by arrival
	QData   string // hash of waiter token -> "client|ttl|alive until|n|owner"
}

// Key suffixes of a semaphore after the lock's own key.
const (
	sufSem      = ":sem"
	sufSemData  = ":sem:d"
	sufSemQueue = ":sem:q"
	sufSemQData = ":sem:qd"
)

// Sem returns the semaphore keys of k's name.
func (k Keys) Sem() SemKeys {
	return SemKeys{Permits: k.Lock + sufSem, Data: k.Lock + sufSemData, Queue: k.Lock + sufSemQueue, QData: k.Lock + sufSemQData}
}

func semAcquire(k Keys, token string, a AcquireArgs) Call {
	s, b := k.Sem(), k.box()
	tok, record := k.tokenArgs(token)
	return mkCall(scripts.SemAcquire, 7, b[5], b[6], b[1], s.Queue, s.QData, record, b[0],
		tok, ms(a.TTL), a.ownerArg(), a.Waiter, ms(a.Alive), ms(a.QueueExpiry), ms(a.FenceLifetime),
		a.Permits, b[4], flag(a.Sharded))
}

func semRefresh(k Keys, token string, ttl time.Duration) Call {
	b := k.box()
	tok, _ := k.tokenArgs(token)
	return mkCall(scripts.SemRefresh, 2, b[5], b[6], tok, ms(ttl))
}

func semRelease(k Keys, token string, a ReleaseArgs) Call {
	s, b := k.Sem(), k.box()
	tok, record := k.tokenArgs(token)
	return mkCall(scripts.SemRelease, 6, b[5], b[6], b[1], s.Queue, s.QData, record,
		tok, ms(a.Record), releaseKind(a, false), b[4], flag(a.Sharded), ms(a.FenceLifetime))
}

func semPTTL(k Keys, token string) Call {
	return mkCall(scripts.SemPTTL, 1, k.Sem().Permits, token)
}
