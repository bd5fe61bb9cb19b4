package dlockadmin

import (
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/inspect"
)

// Lock is one held lock as JSON shows it, the one shape of a lock in the
// admin API (GET /api/locks, GET /api/locks/{name}, the answers of an
// unlock) and in the CLI (`dlock list -o json`, `dlock inspect -o json`).
// The JSON field names are stable: fields may be added, never renamed or
// removed.
//
// It carries a token's first 8 characters only, never the whole token,
// with which its reader could release the lock.
type Lock struct {
	Name string `json:"name"`
	Key  string `json:"key"` // the Redis key of the lock
	// Owner, TokenPrefix and LeaseMS are the holder's; a shared lock has
	// none (each reader has its own, in Readers) and leaves them out, as a
	// semaphore leaves out the last two (see Holders).
	Owner       string    `json:"owner,omitempty"`
	TokenPrefix string    `json:"token_prefix,omitempty"`
	Fence       int64     `json:"fence"`
	Since       time.Time `json:"since"`              // acquisition, on the Redis server's clock, in UTC
	AgeMS       int64     `json:"age_ms"`             // since acquisition, at the time of the listing; never negative
	LeaseMS     int64     `json:"lease_ms,omitempty"` // the lease the holder asked for
	TTLMS       int64     `json:"ttl_ms"`             // lease left now; negative: no expiry
	Waiters     int64     `json:"waiters"`
	Kind        string    `json:"kind"` // "exclusive", "shared" or "semaphore" (dlock.KindExclusive...)
	// Readers of a shared lock; a semaphore's n and its permits (each
	// fence names one permit for unlock); the live waiters in line, first
	// first. Each is left out when empty.
	Readers []Holder `json:"readers,omitempty"`
	Permits int      `json:"permits,omitempty"`
	Holders []Holder `json:"holders,omitempty"`
	Queue   []Waiter `json:"queue,omitempty"`
}

// Holder is one reader of a shared lock, or one permit of a semaphore.
type Holder struct {
	Owner       string    `json:"owner"`
	TokenPrefix string    `json:"token_prefix"`
	Fence       int64     `json:"fence"`
	Since       time.Time `json:"since"`
	LeaseMS     int64     `json:"lease_ms"`
	TTLMS       int64     `json:"ttl_ms"`
}

// Waiter is one live waiter in a lock's line.
type Waiter struct {
	Owner       string `json:"owner"`
	TokenPrefix string `json:"token_prefix"`
	Shared      bool   `json:"shared"`   // waits to read
	AliveMS     int64  `json:"alive_ms"` // how long its entry stays in line without a renewed attempt
}

// LockOf returns i as JSON shows it, with its age at now.
func LockOf(i inspect.LockInfo, now time.Time) Lock {
	l := Lock{
		Name: i.Name, Key: i.Key, Owner: i.Owner, TokenPrefix: i.TokenPrefix(), Fence: i.Fence,
		Since: i.Since.UTC(), AgeMS: age(i, now).Milliseconds(), LeaseMS: i.Lease.Milliseconds(),
		TTLMS: i.TTL.Milliseconds(), Waiters: i.Waiters, Kind: i.Kind, Permits: i.Permits,
	}
	if i.Kind != dlock.KindExclusive {
		l.TokenPrefix = "" // a shared lock's is a marker, a semaphore's empty
	}
	for _, r := range i.Readers {
		l.Readers = append(l.Readers, holderOf(r))
	}
	for _, p := range i.Holders {
		l.Holders = append(l.Holders, holderOf(inspect.ReaderInfo(p)))
	}
	for _, w := range i.Queue {
		l.Queue = append(l.Queue, Waiter{Owner: w.Owner, TokenPrefix: w.TokenPrefix(), Shared: w.Shared, AliveMS: w.Alive.Milliseconds()})
	}
	return l
}

func holderOf(r inspect.ReaderInfo) Holder {
	return Holder{Owner: r.Owner, TokenPrefix: r.TokenPrefix(), Fence: r.Fence, Since: r.Since.UTC(),
		LeaseMS: r.Lease.Milliseconds(), TTLMS: r.TTL.Milliseconds()}
}
