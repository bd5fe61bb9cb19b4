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
	s := k.Sem()
	return mkCall(scripts.SemAcquire, 7, s.Permits, s.Data, k.Fence, s.Queue, s.QData, k.Record+token, k.Lock,
		token, ms(a.TTL), a.Owner, a.Waiter, ms(a.Alive), ms(a.QueueExpiry), ms(a.FenceLifetime),
		a.Permits, k.Handoff, flag(a.Sharded))
}

func semRefresh(k Keys, token string, ttl time.Duration) Call {
	s := k.Sem()
	return mkCall(scripts.SemRefresh, 2, s.Permits, s.Data, token, ms(ttl))
}

func semRelease(k Keys, token string, a ReleaseArgs) Call {
	s := k.Sem()
	return mkCall(scripts.SemRelease, 6, s.Permits, s.Data, k.Fence, s.Queue, s.QData, k.Record+token,
		token, ms(a.Record), releaseKind(a, false), k.Handoff, flag(a.Sharded), ms(a.FenceLifetime))
}

func semPTTL(k Keys, token string) Call {
	return mkCall(scripts.SemPTTL, 1, k.Sem().Permits, token)
}
