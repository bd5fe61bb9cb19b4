package dlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors, matched with errors.Is: one per meaning. Every error a
// Client returns is an *Error that names the operation and the lock, and
// wraps one of them or the error Redis or the network gave.
var (
	// ErrNotObtained: the lock is held by someone else and this call gave up.
	// The concrete error is a *NotObtainedError, which tells how long the
	// holder's lease still runs.
	ErrNotObtained = errors.New("dlock: not obtained")

	// ErrNotHeld: the lock is not (or no longer) ours: it was released
	// already, it expired, or another holder has it now. Nothing was changed
	// in Redis.
	ErrNotHeld = errors.New("dlock: not held")

	// ErrLockLost is the cause of a lock's context when ownership was lost
	// while the lock was believed held.
	ErrLockLost = errors.New("dlock: lock lost")

	// ErrHoldLimit is part of the cause of a lock's context when WithMaxHold's
	// limit ended the lock; such a cause also matches ErrLockLost.
	ErrHoldLimit = errors.New("dlock: hold limit")

	// ErrReleased is the cause of a lock's context after Release. A lock
	// that the Locker's Close released has a cause matching both
	// ErrReleased and ErrClosed.
	ErrReleased = errors.New("dlock: released")

	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("dlock: client closed")

	// ErrInvalidName: the lock name is empty or too long, or a set of names
	// (AcquireAll) is empty or has one twice. Nothing was sent to Redis.
	ErrInvalidName = errors.New("dlock: invalid lock name")

	// ErrInvalidTTL: a TTL is zero, negative or outside the client's bounds.
	// Nothing was sent to Redis.
	ErrInvalidTTL = errors.New("dlock: invalid ttl")

	// ErrInvalidOption: an option is out of range (a negative wait or hold
	// limit, WithReplicas without a timeout, a prefix with braces). Nothing
	// was sent to Redis.
	ErrInvalidOption = errors.New("dlock: invalid option")

	// ErrWrongType: the lock's key in Redis holds a value dlock did not write
	// (Redis answered WRONGTYPE). Nothing was changed.
	ErrWrongType = errors.New("dlock: key holds a value of another type")

	// ErrReentrant: the caller's context already holds the lock it asked
	// for (see lockerkit.CheckReentry). Nothing was sent to Redis; the lock it holds
	// is unchanged. dlock locks are not re-entrant: acquire once, at the
	// outermost layer, and pass the lock (or its context) down.
	ErrReentrant = errors.New("dlock: already held by this caller")

	// ErrUnavailable matches failures to reach a working Redis: the network
	// (refused, reset, timed out, closed), go-redis' pool (timed out or
	// closed), and servers that cannot serve now (LOADING, MASTERDOWN,
	// CLUSTERDOWN, TRYAGAIN, READONLY, BUSY, NOREPLICAS, OOM). It never
	// matches a busy lock or the caller's own context ending. The outcome of
	// the operation may be unknown; retrying later may help.
	ErrUnavailable = errors.New("dlock: redis unavailable")

	// ErrUnsupportedServer: the Redis server is too old for dlock's scripts
	// (or, in a Cluster, for its shard channels). The error names the
	// version found and the version needed; every acquisition on the Client
	// returns it.
	ErrUnsupportedServer = errors.New("dlock: unsupported server")

	// ErrNotReplicated: WithReplicas asked for more replica acknowledgements
	// than arrived in time. The lock was released again; the error wraps a
	// *ReplicaError.
	ErrNotReplicated = errors.New("dlock: not replicated")

	// ErrNotDurable: WithDurableGrant asked for a grant on disk that the
	// server did not confirm in time, or refused to confirm (AOF off). The
	// lock was released again; the error wraps a *DurableError. A Refresh
	// of such a lock that is not confirmed returns it too.
	ErrNotDurable = errors.New("dlock: not durable")

	// ErrMismatch: the name is in use in a way this acquisition does not
	// agree with: a semaphore acquisition (WithPermits) on a name held as an
	// exclusive lock, or with another number of permits than the holders'.
	// The error names both. Nothing was taken.
	ErrMismatch = errors.New("dlock: name in use with other settings")
)

// Error is the error of one operation on one lock. Every error a Client or
// a Lock returns is one (errors.As finds it), or a join of them.
type Error struct {
	// Op is the operation: "acquire", "release", "refresh", "ttl", "do",
	// "inspect", "force unlock", "list", "new".
	Op string
	// Name is the lock's name; empty when the operation concerns no single
	// lock (List, New).
	Name string
	// Err is what went wrong: one of the sentinels, a *NotObtainedError, a
	// *ReplicaError, or what Redis or the network returned.
	Err error
}

func (e *Error) Error() string {
	msg := "<nil>"
	if e.Err != nil {
		// One "dlock:" prefix in all, also where causes nest sentinels.
		msg = strings.ReplaceAll(strings.TrimPrefix(e.Err.Error(), "dlock: "), ": dlock: ", ": ")
	}
	if e.Name == "" {
		return "dlock: " + e.Op + ": " + msg
	}
	return fmt.Sprintf("dlock: %s %q: %s", e.Op, e.Name, msg)
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) true when Err is a network, pool
// or server-unavailable failure.
func (e *Error) Is(target error) bool {
	return target == ErrUnavailable && unavailable(e.Err)
}

// opError names the operation and the lock that failed.
func opError(op, name string, err error) error {
	return &Error{Op: op, Name: name, Err: err}
}

// unavailable reports whether err says Redis could not be reached or could
// not serve: the failures worth retrying later, as opposed to bad input, a
// busy lock, a lock that is not ours, or the caller's own context ending.
func unavailable(err error) bool {
	var nerr net.Error
	var operr *net.OpError
	switch {
	case err == nil, errors.Is(err, ErrNotObtained):
		// A busy lock whose wait the caller's deadline ended carries that
		// deadline: it is busy, not unavailable.
		return false
	case errors.Is(err, ErrUnavailable):
		return true
	case errors.As(err, &operr), errors.Is(err, os.ErrDeadlineExceeded):
		// A read or dial that timed out on the connection (a blackholed
		// server), whatever deadline set it.
		return true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller's context ended (DeadlineExceeded is a net.Error too):
		// that says nothing of Redis.
		return false
	case errors.As(err, &nerr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return true
	}
	for _, prefix := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "BUSY", "NOREPLICAS", "OOM"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// outage reports whether err is an outage a wait rides out: unavailable,
// but not the go-redis client closed under us, which no waiting cures.
//
// Too few replicas acknowledging a grant (ErrNotReplicated) is one too: the
// grant was released or given back, and the replicas catch up or are
// promoted (a failover under way); a later attempt confirms again.
//
// So is a MOVED or ASK that a Cluster client could not follow (its
// redirects used up, or its reloaded slot map not showing the node yet):
// the slot map is in flux, a failover or a migration under way, as with
// TRYAGAIN (the torture suite's Cluster rows ended waits on them). A client
// of one node that meets MOVED talks to a Cluster node as if it were a
// standalone server: no waiting cures that (see clusterHint).
func (c *Client) outage(err error) bool {
	if errors.Is(err, redis.ErrClosed) {
		return false
	}
	if unavailable(err) || errors.Is(err, ErrNotReplicated) || (errors.Is(err, ErrNotDurable) && !durableRefused(err)) {
		return true
	}
	_, cluster := c.rdb.(*redis.ClusterClient)
	return cluster && redirect(err)
}

func redirect(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED ") || redis.HasErrorPrefix(err, "ASK ")
}

// clusterHint says what a MOVED or ASK means to a client that does not
// follow them: it was given one node of a Cluster.
func (c *Client) clusterHint(err error) error {
	if _, cluster := c.rdb.(*redis.ClusterClient); cluster || !redirect(err) {
		return err
	}
	return fmt.Errorf("%w (a Redis Cluster node answered: connect with redis.NewClusterClient, or redis.NewUniversalClient with the nodes' addresses)", err)
}

// NotObtainedError is returned, wrapped in an *Error, when another holder has
// the lock. It matches ErrNotObtained, and also the context's error when the
// context ended the wait, so callers can tell "busy" from "gave up because
// cancelled".
type NotObtainedError struct {
	// Name is the lock's name.
	Name string
	// HolderTTL is the holder's remaining lease as Redis reported it on the
	// last attempt: a good Retry-After, though a holder that is still
	// working renews it. Zero when unknown; negative when the key has no
	// expiry, which only happens when something other than dlock wrote it.
	HolderTTL time.Duration

	// Who held the name at the last attempt, as Redis answered it; the zero
	// values where it did not say (an error before any answer, or a Locker
	// that does not tell).
	//
	// Kind is KindExclusive, KindShared (Readers readers hold it) or
	// KindSemaphore (Held of its Permits permits are held). Owner is the
	// exclusive holder's owner text (WithDefaultOwner; host/pid by default). MinHold:
	// the holder released it before its min hold (WithMinHold), and the name
	// is kept, renewed by nobody, until HolderTTL ends. Waiters is how many
	// wait in line in Redis, this attempt included when it waited. Self: the
	// holder is a lock this same Client holds (its owner text and fence
	// are this Client's lock's), so the caller may be waiting for itself:
	// locks are not re-entrant (see WithReentry), and an Acquire of a name
	// its caller holds, under a context that does not carry the lock, waits
	// until that is released. Another goroutine of the process may be the
	// holder too; the Client cannot tell goroutines apart.
	Kind          string
	Owner         string
	Readers       int
	Held, Permits int
	MinHold       bool
	Waiters       int64
	Self          bool

	cause  error // the context's error, when it ended the wait
	waited bool  // the wait limit ended the wait
	// holderFence is the exclusive holder's fence, for confirmSelf.
	holderFence int64
	// late: the lock was granted, but the reply took this long, past the
	// deadline of its lease: the grant was given back.
	late, lease time.Duration
	// outage is the last error of an outage the wait rode out until it
	// ended (Redis unreachable, READONLY, LOADING, ...), for the last
	// outageFor of the wait.
	outage    error
	outageFor time.Duration
}

func (e *NotObtainedError) Error() string {
	if e.late > 0 {
		return fmt.Sprintf("dlock: not obtained: the reply granting it came %v after it was sent, past the deadline of its %v lease; the grant was given back",
			e.late.Round(time.Millisecond), e.lease)
	}
	if e.outage != nil {
		what := e.outage
		if oe, ok := what.(*Error); ok && oe.Err != nil {
			what = oe.Err // the operation and name are the outer error's
		}
		why := "Redis could not serve the wait"
		if errors.Is(what, ErrNotReplicated) {
			why = "too few replicas acknowledged its grants, each released,"
		}
		if errors.Is(what, ErrNotDurable) {
			why = "the server did not confirm its grants on disk, each released,"
		}
		msg := fmt.Sprintf("dlock: not obtained: %s for its last %v (%s)",
			why, e.outageFor.Round(time.Millisecond), strings.TrimPrefix(what.Error(), "dlock: "))
		if e.cause != nil {
			msg += ": " + e.cause.Error()
		}
		return msg
	}
	msg := "dlock: not obtained: " + e.holderText()
	if e.Waiters > 0 {
		msg += fmt.Sprintf("; %d in line", e.Waiters)
	}
	if e.Self {
		msg += "; this Client holds it: if the caller is its holder, it waits for itself (locks are not re-entrant unless WithReentry; pass the lock's context to be refused at once)"
	}
	if e.cause != nil {
		msg += ": " + e.cause.Error()
	}
	return msg
}

// holderText says who holds the name and what its lease means.
func (e *NotObtainedError) holderText() string {
	left := e.HolderTTL.Round(time.Millisecond)
	switch e.Kind {
	case KindShared:
		return fmt.Sprintf("held by %s (a shared lock; the last lease ends in %v unless renewed while they work)", readersText(e.Readers), left)
	case KindSemaphore:
		return fmt.Sprintf("all %d of WithPermits(%d) held (a semaphore; the first lease ends in %v unless renewed)", e.Held, e.Permits, left)
	}
	who := "another owner"
	if e.Owner != "" {
		who = strconv.Quote(e.Owner)
	}
	switch {
	case e.MinHold:
		return fmt.Sprintf("kept for its min hold: %s released it before its WithMinHold ended; it frees in %v (nothing renews it)", who, left)
	case e.HolderTTL > 0:
		return fmt.Sprintf("held by %s (lease left %v, renewed while the holder works)", who, left)
	case e.HolderTTL < 0:
		return fmt.Sprintf("held by %s with no expiry", who)
	}
	return "held by " + who
}

func readersText(n int) string {
	switch n {
	case 0:
		return "readers"
	case 1:
		return "1 reader"
	}
	return fmt.Sprintf("%d readers", n)
}

// Is makes errors.Is(err, ErrNotObtained) true.
func (e *NotObtainedError) Is(target error) bool { return target == ErrNotObtained }

// Unwrap returns the context's error when it ended the wait, or the last
// error of an outage the wait was riding out when it ended (which matches
// ErrUnavailable, or ErrNotReplicated when too few replicas acknowledged
// its grants: WithReplicas, or ErrNotDurable when the server did not
// confirm them on disk: WithDurableGrant), or both joined.
func (e *NotObtainedError) Unwrap() error {
	switch {
	case e.outage == nil:
		return e.cause
	case e.cause == nil:
		return e.outage
	}
	return errors.Join(e.cause, e.outage)
}

// ReplicaError tells how many replicas acknowledged a new lock in time
// (WithReplicas). It matches ErrNotReplicated.
type ReplicaError struct {
	Acked      int64
	Want       int
	Timeout    time.Duration
	releaseErr error // releasing the unconfirmed lock failed too
}

func (e *ReplicaError) Error() string {
	msg := fmt.Sprintf("dlock: not replicated: %d of %d replicas acknowledged within %v; lock released", e.Acked, e.Want, e.Timeout)
	if e.releaseErr != nil {
		msg = fmt.Sprintf("dlock: not replicated: %d of %d replicas acknowledged within %v; releasing it failed too (%v), it expires with its TTL",
			e.Acked, e.Want, e.Timeout, e.releaseErr)
	}
	return msg
}

// Is makes errors.Is(err, ErrNotReplicated) true.
func (e *ReplicaError) Is(target error) bool { return target == ErrNotReplicated }

// Unwrap returns the error of releasing the unconfirmed lock, if that failed.
func (e *ReplicaError) Unwrap() error { return e.releaseErr }

// wrongTypeError is Redis' WRONGTYPE reply, matching ErrWrongType.
type wrongTypeError struct{ err error }

func (e *wrongTypeError) Error() string {
	return ErrWrongType.Error() + " (" + e.err.Error() + ")"
}
func (e *wrongTypeError) Is(target error) bool { return target == ErrWrongType }
func (e *wrongTypeError) Unwrap() error        { return e.err }

// redisError maps an error from Redis to dlock's sentinels where one fits.
func redisError(err error) error {
	if err != nil && strings.Contains(err.Error(), "WRONGTYPE") {
		return &wrongTypeError{err: err}
	}
	return err
}

// durableRefused reports whether err is a server's refusal of WAITAOF
// (WithDurableGrant with AOF off): for good, not an outage to wait out.
func durableRefused(err error) bool {
	var de *DurableError
	return errors.As(err, &de) && de.Refused != ""
}
