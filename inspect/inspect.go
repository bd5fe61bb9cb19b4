// Package inspect holds what a dlock Client reads back about the locks in
// Redis, for operators and the tools they use (the dlock CLI, the admin
// view, the fleet metrics): Client.Inspect, List and ForceUnlock return a
// LockInfo, Client.Scan takes ScanOptions and returns ScanStats. Every value
// is a snapshot; the lock may change right after.
package inspect

import "time"

// LockInfo is what Redis says about one held lock, for operators: the CLI,
// the admin view. It is a snapshot; the lock may change right after.
type LockInfo struct {
	Name    string        // the lock's name
	Key     string        // its key in Redis
	Owner   string        // free text of the holder (dlock.WithOwner, or the Client's dlock.WithDefaultOwner; host/pid by default)
	Token   string        // the holder's token: show TokenPrefix, never the whole
	Fence   int64         // the holder's fencing token
	Since   time.Time     // when this holder acquired it (the Redis server's clock)
	Lease   time.Duration // the lease the holder asked for (its TTL)
	TTL     time.Duration // what is left of the lease now
	Waiters int64         // waiters lined up for it in Redis, one per waiting goroutine

	// Kind is dlock.KindExclusive, dlock.KindShared when readers
	// (dlock.WithShared) hold it, or dlock.KindSemaphore.
	// A read lock's Token is a marker, not a holder's, Owner is empty, Fence
	// is the largest reader fence, Since the oldest reader's, TTL the longest
	// reader lease left, and Readers has each live reader, in grant order.
	// A semaphore's info has no Token and no Lease; Owner reads "k/n
	// permits", Since is the earliest grant, Fence the latest, TTL the time
	// until the first permit comes back.
	Kind    string
	Readers []ReaderInfo
	Permits int          // a semaphore's n
	Holders []PermitInfo // a semaphore's live permits, the first to come back first
	// Queue is the live waiters in line, first first (at most
	// 100 of them), with their owners.
	Queue []WaiterInfo
}

// TokenPrefix is the first 8 characters of the token: enough to tell two
// acquisitions apart on a screen, too little to release the lock with.
func (i LockInfo) TokenPrefix() string {
	if len(i.Token) > 8 {
		return i.Token[:8]
	}
	return i.Token
}

// Age is how long the lock has been held at now.
func (i LockInfo) Age(now time.Time) time.Duration { return now.Sub(i.Since) }

// ReaderInfo is one reader of a shared lock, in LockInfo.Readers.
type ReaderInfo struct {
	Owner string        // free text of the reader (dlock.WithOwner or dlock.WithDefaultOwner)
	Token string        // its token: show TokenPrefix, never the whole
	Fence int64         // its grant's fence
	Since time.Time     // when it acquired (the Redis server's clock)
	Lease time.Duration // the lease it asked for
	TTL   time.Duration // what is left of it now
}

// TokenPrefix is the first 8 characters of the token, as LockInfo's.
func (r ReaderInfo) TokenPrefix() string { return LockInfo{Token: r.Token}.TokenPrefix() }

// WaiterInfo is one client in line for a lock, in LockInfo.Queue.
type WaiterInfo struct {
	Owner  string // free text of the waiting client (dlock.WithOwner or dlock.WithDefaultOwner)
	Token  string // the token it waits with: show TokenPrefix, never the whole
	Shared bool   // it waits for a read lock
	// Alive is how long its entry stays in line without a renewed attempt:
	// a waiter that crashed drops out when it runs out.
	Alive time.Duration
}

// TokenPrefix is the first 8 characters of the token, as LockInfo's.
func (w WaiterInfo) TokenPrefix() string { return LockInfo{Token: w.Token}.TokenPrefix() }

// PermitInfo is one held permit of a semaphore, for operators.
type PermitInfo struct {
	Owner string        // free text of the holder
	Token string        // the permit's token: show TokenPrefix, never the whole
	Fence int64         // the fence of this permit's grant
	Since time.Time     // when it was granted (the Redis server's clock)
	Lease time.Duration // the lease the holder asked for
	TTL   time.Duration // what is left of its lease now
}

// TokenPrefix is the first 8 characters of the token, as LockInfo's.
func (p PermitInfo) TokenPrefix() string { return LockInfo{Token: p.Token}.TokenPrefix() }

// ScanOptions bound a dlock.Client's Scan.
type ScanOptions struct {
	// Match is a glob over lock names, as Client.List's ("" or "*" for all).
	Match string
	// MaxKeys bounds the keys SCAN looks at, all primaries together (0: no
	// bound). SCAN's COUNT is how many keys one call looks at (roughly:
	// Redis walks whole hash buckets), matching or not, so a keyspace of
	// other data costs as much as one of locks: the walk stops once the
	// COUNTs of its calls add up to MaxKeys, and says so in Truncated.
	MaxKeys int
	// Brief leaves out LockInfo.Queue, the head of each line with its
	// owners; Waiters still counts the line. Two reads fewer per lock, and
	// none that grows with the line: what counting needs.
	Brief bool
}

// ScanStats tell how far a Scan went.
type ScanStats struct {
	Calls     int  // SCAN calls sent
	Examined  int  // keys those calls were asked to look at: the sum of their COUNTs
	Keys      int  // keys they returned (dlock's, under the prefix)
	Locks     int  // held locks read and handed to fn
	Truncated bool // stopped by MaxKeys or by ctx before the end of the keyspace
	// Now is the Redis server's clock when the walk began: ages of the
	// locks found are Now minus their Since, on one clock.
	Now time.Time
}
