// Package lockerkit is for the authors of Lockers other than dlock's Client
// (redlock and dlocktest are two; a user's own is another): it reads
// dlock's AcquireOptions, checks input, re-enters and builds busy errors by
// the rules the Client applies, so that every Locker refuses the same
// input with the same errors and shares one re-entry. A lock's user does
// not need it.
//
// A Locker's acquisition calls, in this order: ReadAcquireOptions (bad
// input is an error before anything is sent); Reenter when the settings
// ask for re-entry, else CheckReentry (a caller waiting for a lock it holds
// would wait for itself); then its own protocol, wrapping the lock with
// Reentrant when re-entry was asked. A busy lock is reported with
// NewNotObtainedError, wrapped in a *dlock.Error of Op "acquire".
package lockerkit

import (
	"context"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/kit"
)

// ErrReleasedByClose is the cause to give the context of a lock that a
// Locker's Close released: it matches dlock.ErrReleased and dlock.ErrClosed,
// with the Client's text, so that dlock.Run tells the work it may not have
// run alone to its end.
var ErrReleasedByClose = kit.ClosedRelease

// TTLBounds are a Locker's default TTL and the smallest and largest it
// accepts, for ReadAcquireOptions.
type TTLBounds struct{ Default, Min, Max time.Duration }

// Check reports an error matching dlock.ErrInvalidTTL when ttl is not
// positive or outside [b.Min, b.Max], as Refresh does.
func (b TTLBounds) Check(ttl time.Duration) error { return kit.CheckTTL(ttl, kit.Bounds(b)) }

// DefaultTTLBounds are a dlock Client's bounds without options.
var DefaultTTLBounds = TTLBounds{Default: dlock.DefaultTTL, Min: dlock.DefaultMinTTL, Max: dlock.DefaultMaxTTL}

// AcquireSettings is what a list of AcquireOptions asks of one acquisition,
// read by ReadAcquireOptions.
type AcquireSettings struct {
	TTL     time.Duration // WithTTL, or the Locker's default; whole ms, at most MaxHold
	Wait    time.Duration // WithWait, or dlock.DefaultWait
	Renew   bool          // false after WithoutRenewal
	MaxHold time.Duration // WithMaxHold; 0: no limit
	MinHold time.Duration // WithMinHold; 0: none
	// Replicas and ReplicaTimeout are WithReplicas'; 0 without it.
	Replicas       int
	ReplicaTimeout time.Duration
	// DurableGrant is WithDurableGrant's timeout; 0 without it, and within
	// its bounds (at least 1ms, at most a third of a renewed lock's TTL)
	// once ReadAcquireOptions returns. A Locker that cannot confirm its
	// grants on disk refuses it with dlock.ErrInvalidOption; one with
	// nothing a restart can lose (dlocktest) accepts it.
	DurableGrant time.Duration
	// Reentrant is WithReentry's: see Reenter and Reentrant.
	Reentrant bool
	// HoldWarning is when a hold is reported as long: WithHoldWarning's, or
	// dlock.DefaultHoldWarningTTLs times the TTL; 0: never.
	HoldWarning time.Duration
	// Owner is WithOwner's text; "" means the Locker's own.
	Owner string
	// Shared is WithShared's: a read lock. A Locker without read locks
	// refuses it with dlock.ErrInvalidOption. NoWriterPriority is
	// WithoutWriterPriority's.
	Shared           bool
	NoWriterPriority bool
	// Permits is WithPermits' n: the acquisition takes one of n permits of
	// the name. 0 for an exclusive lock. A Locker without semaphores refuses
	// a non-zero value with dlock.ErrInvalidOption.
	Permits int
}

// ReadAcquireOptions applies opts and checks them and name by the rules the
// Client applies, with the TTL bounds b: an error is a *dlock.Error of Op
// "acquire" matching dlock.ErrInvalidName, ErrInvalidTTL or
// ErrInvalidOption.
func ReadAcquireOptions(name string, b TTLBounds, opts ...dlock.AcquireOption) (AcquireSettings, error) {
	s, err := kit.ReadAcquire(name, kit.Bounds(b), opts)
	return AcquireSettings(s), err
}

// CheckReentry refuses to acquire name for a caller that holds it already:
// when ctx carries a lock of that name (alone, or as a member of a
// dlock.MultiLock) that is still held and that mine says is of this
// Locker, it returns a *dlock.Error of Op "acquire" matching
// dlock.ErrReentrant, at once. Waiting would be a self-deadlock: the lock
// is never released while its holder waits for it, and the wait would end
// in a misleading "held by another owner". Every Locker calls it before it
// sends anything; mine must be nil-safe. The check is by context, Go
// having no goroutine identity: a goroutine that should wait for the
// holder instead starts from dlock.DetachContext.
func CheckReentry(ctx context.Context, name string, mine func(dlock.Lock) bool) error {
	return kit.CheckReentry(ctx, name, mine)
}

// Reenter is how an acquisition with WithReentry and the settings s looks
// for a lock its context holds (mine as for CheckReentry). It returns a new
// handle on the held lock when ctx holds name through one of the Locker's
// locks taken with WithReentry, of a kind that covers s; an error matching
// dlock.ErrReentrant when ctx holds it through one taken without
// WithReentry, or of a kind that does not cover s (a write under a read
// lock, a lock under a permit, another number of permits); and nil, nil
// when ctx does not hold name: then the caller acquires it, and wraps the
// lock with Reentrant.
func Reenter(ctx context.Context, name string, s AcquireSettings, mine func(dlock.Lock) bool) (dlock.Lock, error) {
	l, err := kit.Reenter(ctx, name, s.Shared, s.Permits, mine)
	if l == nil {
		return nil, err
	}
	return l.(dlock.Lock), err
}

// Reentrant makes l, just acquired with WithReentry and the settings s,
// the first handle of a re-entrant lock: a nested acquisition finds it in
// the context (Reenter) and shares it, and l is released when the last
// handle is. A nil l stays nil.
func Reentrant(l dlock.Lock, s AcquireSettings) dlock.Lock {
	if l == nil {
		return nil
	}
	return kit.Reentrant(l, s.Shared, s.Permits).(dlock.Lock)
}

// NewNotObtainedError returns the error of a busy lock with the Client's
// shape: a *dlock.NotObtainedError for name that matches
// dlock.ErrNotObtained and reports holderTTL, the holder's remaining lease
// (0 when unknown). When cause is not nil it also matches cause: pass the
// context's error when the caller's context ended the wait, and nil when a
// single attempt or the wait limit (WithWait) did, as the Client does.
// NotObtainedError keeps the cause in an unexported field, so this is the
// one way to set it: a Locker that wrapped the two errors itself would
// differ from the Client in the chain errors.As walks and in the message.
// Its DuringOutage method records an outage that the wait was riding out.
//
// Wrap the result in a *dlock.Error of Op "acquire" naming the lock, as
// every Locker's errors are.
func NewNotObtainedError(name string, holderTTL time.Duration, cause error) *dlock.NotObtainedError {
	return kit.NotObtained(name, holderTTL, cause).(*dlock.NotObtainedError)
}
