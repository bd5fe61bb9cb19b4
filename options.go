package dlock

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/kit"
	"github.com/dlock-go/dlock/internal/node"
)

// Defaults and limits. Each can be changed per Client with an Option.
const (
	// DefaultPrefix starts every key dlock writes.
	DefaultPrefix = "dlock:"
	// DefaultTTL is the lease of an acquisition without WithTTL.
	DefaultTTL = 10 * time.Second
	// DefaultMinTTL and DefaultMaxTTL bound every TTL. They catch unit
	// mistakes (10 meant as seconds but read as nanoseconds, or hours meant
	// as milliseconds) before anything reaches Redis, which would accept both.
	DefaultMinTTL = 10 * time.Millisecond
	DefaultMaxTTL = 24 * time.Hour
	// DefaultWait is how long Acquire waits for a busy lock without WithWait.
	DefaultWait = 10 * time.Second
	// MaxNameLength is the longest lock name, in bytes.
	MaxNameLength = 512
	// MaxPermits is the largest n WithPermits accepts. Each script of a
	// semaphore may walk every permit (purging expired ones, handing freed
	// ones on), so n bounds the work one Redis call can do while the server
	// runs nothing else.
	MaxPermits = 10000
	// DefaultReleaseTimeout bounds a release. Release runs on a context of
	// its own, because the caller's is often already cancelled when the
	// deferred release runs, and the lock must still be let go.
	DefaultReleaseTimeout = 5 * time.Second
	// DefaultHoldWarningTTLs is the hold warning's threshold without
	// WithHoldWarning, in TTLs: a lock held for ten of its leases is worth
	// a look (see WithHoldWarning).
	DefaultHoldWarningTTLs = 10
	// DefaultFenceLifetime is how long a name's fence counter stays in Redis
	// after its last acquisition. Without a limit every name ever locked
	// (order:<id>) would leave a key behind for good.
	DefaultFenceLifetime = 7 * 24 * time.Hour
	// DefaultBatchDepth is how many round trips a Client keeps out to one
	// Redis node before further lock calls wait and leave together in one
	// pipeline (see WithBatchDepth). Measured in bench/ on 2 cores: 4
	// gave 0.63x the raw baseline at 16 goroutines where 2 gave 0.56x, and
	// the same at 64 (about 1x); 8 lost at 64 (0.85x).
	DefaultBatchDepth = 4
)

// An Option configures a Client: given to New, applied in order. Its
// sibling, AcquireOption, configures one acquisition: given to Acquire,
// TryAcquire or Do. The names follow one rule: an option is With followed by
// what it sets (WithTTL, WithPermits), or Without followed by the default it
// turns off (WithoutRenewal); and a Client option whose value an acquisition
// can override says Default (WithDefaultTTL beside the per-call WithTTL,
// WithDefaultOwner beside WithOwner).
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	prefix         string
	defaultTTL     time.Duration
	minTTL, maxTTL time.Duration
	owner          string
	releaseTimeout time.Duration
	fenceLifetime  time.Duration
	batchDepth     int
	observers      observers
	err            error // first invalid option, returned by New

	// logger is WithLogger's, for warnings about the server; nil means
	// slog.Default().
	logger *slog.Logger
}

func defaultConfig() config {
	host, _ := os.Hostname()
	return config{
		prefix:         DefaultPrefix,
		defaultTTL:     DefaultTTL,
		minTTL:         DefaultMinTTL,
		maxTTL:         DefaultMaxTTL,
		owner:          host + "/" + strconv.Itoa(os.Getpid()),
		releaseTimeout: DefaultReleaseTimeout,
		fenceLifetime:  DefaultFenceLifetime,
		batchDepth:     DefaultBatchDepth,
	}
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithPrefix sets the prefix of every key and channel (default "dlock:").
// Clients that should see each other's locks must use the same prefix. A
// prefix must not be empty, nor contain '{' or '}', which would change the
// keys' hash tag.
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) {
		if err := node.CheckPrefix(p); err != nil {
			c.fail(fmt.Errorf("%w: %v", ErrInvalidOption, err))
			return
		}
		c.prefix = p
	})
}

// WithDefaultTTL sets the lease used when an acquisition has no WithTTL
// (default DefaultTTL, 10s).
func WithDefaultTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.defaultTTL = d })
}

// WithTTLBounds sets the smallest and largest TTL the client accepts
// (defaults DefaultMinTTL 10ms and DefaultMaxTTL 24h). A TTL outside them is
// refused with ErrInvalidTTL before anything is sent.
func WithTTLBounds(lo, hi time.Duration) Option {
	return optionFunc(func(c *config) {
		if lo < time.Millisecond || hi < lo {
			c.fail(fmt.Errorf("%w: bounds [%v, %v] need 1ms <= min <= max", ErrInvalidTTL, lo, hi))
			return
		}
		c.minTTL, c.maxTTL = lo, hi
	})
}

// WithDefaultOwner sets the free text stored with every lock as its owner, shown by
// the CLI and the admin view (default "hostname/pid").
func WithDefaultOwner(owner string) Option {
	return optionFunc(func(c *config) { c.owner = owner })
}

// WithReleaseTimeout bounds each release (default DefaultReleaseTimeout).
func WithReleaseTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail(fmt.Errorf("%w: release timeout %v must be positive", ErrInvalidOption, d))
			return
		}
		c.releaseTimeout = d
	})
}

// WithFenceLifetime sets how long a name's fence counter is kept after the
// last acquisition of that name (default DefaultFenceLifetime, 7 days; at
// least a second). Fences keep growing when the counter has expired: every
// fence is at least the Redis server's clock in µs. The lifetime matters only
// if that clock could go back: a counter still present bridges that.
func WithFenceLifetime(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Second {
			c.fail(fmt.Errorf("%w: fence lifetime %v is below 1s", ErrInvalidOption, d))
			return
		}
		c.fenceLifetime = d
	})
}

// An AcquireOption configures one acquisition: given to Acquire, TryAcquire
// or Do. Options that configure the Client itself, and the defaults an
// AcquireOption overrides (WithDefaultTTL for WithTTL, WithDefaultOwner for
// WithOwner), are Options, given to New; the naming rule is on Option.
type AcquireOption interface{ applyAcquire(*acquireConfig) }

type acquireOptionFunc func(*acquireConfig)

func (f acquireOptionFunc) applyAcquire(c *acquireConfig) { f(c) }

type acquireConfig struct {
	ttl     time.Duration
	wait    time.Duration
	renew   bool
	maxHold time.Duration
	minHold time.Duration // WithMinHold; 0: none

	replicas    int           // WithReplicas: acknowledgements to wait for
	replicaWait time.Duration // and how long
	durable     time.Duration // WithDurableGrant: how long WAITAOF may wait; 0: not asked

	reentrant bool // WithReentry

	holdWarn    time.Duration // WithHoldWarning; 0: none
	holdWarnSet bool          // WithHoldWarning was given; else DefaultHoldWarningTTLs × TTL

	owner string // WithOwner; "" for the Locker's own

	shared      bool // Shared: a read lock (rw.go)
	skipWriters bool // WithoutWriterPriority

	semaphore bool // Permits was given: take one of permits
	permits   int
}

// WithTTL sets the lock's lease: how long Redis keeps the lock if the holder
// stops renewing it, for example because it crashed. Without it the client's
// default applies (DefaultTTL unless WithDefaultTTL changed it). It must lie
// within the client's bounds (WithTTLBounds); it is rounded down to whole
// milliseconds.
func WithTTL(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.ttl = d })
}

// WithWait bounds how long Acquire waits for a busy lock (default
// DefaultWait, 10s), and for Redis through an outage (see Acquire).
// WithWait(0) makes Acquire a single attempt, like TryAcquire. The caller's context bounds the wait too; whichever ends first
// wins. TryAcquire ignores it.
func WithWait(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.wait = d })
}

// WithoutRenewal acquires a fixed lease: nobody renews it, and the lock's
// context ends when the TTL (less a drift margin) has passed. By default
// every lock is renewed at a third of its TTL while it is held.
func WithoutRenewal() AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.renew = false })
}

// WithMaxHold bounds how long the lock is held in all: no lease (the first,
// a renewal or a Refresh) runs beyond d after acquisition, and the lock's
// context ends then, with a cause matching ErrHoldLimit and ErrLockLost. For
// work that must not run away. Zero (the default) means no limit; d must not
// be below the client's minimum TTL. Redlock refuses it.
func WithMaxHold(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.maxHold = d })
}

// WithReentry makes the acquisition re-entrant, scoped by context: when the
// caller's context already holds name through the same Locker, taken with
// WithReentry too, Acquire and TryAcquire return at once a nested handle on
// that lock instead of waiting for the caller itself. A handle has the lock's
// name, token and fence; its TTL and Refresh act on the lock; its Release
// ends only the handle (and its context, with cause ErrReleased). The lock is
// released when the last of its handles, the first acquisition included, is
// released, in whatever order. Other options of a nested acquisition are
// ignored: the lock is already held on the outer acquisition's terms; but
// its kind must be covered: a read (WithShared) may share a write lock, while a
// write under a read lock, a lock under a permit (WithPermits) or another
// number of permits is refused with ErrReentrant.
//
// A name held through a lock taken without WithReentry is refused with
// ErrReentrant, as every acquisition without WithReentry is: both the outer
// and the inner code must agree to share. Re-entry is off by default because
// it hides where a critical section ends: the inner Release does nothing, so
// the inner code cannot tell whether it runs alone.
func WithReentry() AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.reentrant = true })
}

// WithHoldWarning reports a hold that runs past d: once per lock, with an
// observe.Observer's OnHoldWarning event, a Warn log (WithLogger) and a metric
// (dlockprom, dlockotel). It is the articles' "actual run time versus
// configured TTL" item: work that outlives what its TTL was sized for is
// found before it outlives its lease. A renewed lock is reported by the first
// renewal after d (within a third of its TTL), any lock at its release at the
// latest (a lock lost before is not: it was held until the loss). Without it
// the threshold is DefaultHoldWarningTTLs times the TTL asked at acquisition
// (a later Refresh to another TTL does not move it); WithHoldWarning(0)
// turns the warning off; a negative d is refused. Only the Redis Client
// reports hold warnings: redlock and dlocktest accept the option and report
// none.
func WithHoldWarning(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.holdWarn, c.holdWarnSet = d, true })
}

// checkTTL enforces the client's TTL bounds.
func (c *config) checkTTL(d time.Duration) error { return checkTTL(d, c.minTTL, c.maxTTL) }

func checkTTL(d, lo, hi time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("%w: %v is not positive", ErrInvalidTTL, d)
	case d < lo:
		return fmt.Errorf("%w: %v is below the minimum %v", ErrInvalidTTL, d, lo)
	case d > hi:
		return fmt.Errorf("%w: %v is above the maximum %v", ErrInvalidTTL, d, hi)
	}
	return nil
}

// ttlBounds are a Locker's default TTL and the smallest and largest it
// accepts (lockerkit.TTLBounds outside this package).
type ttlBounds = kit.Bounds

// checkName refuses names Redis would take but no user means: the empty
// name, and names longer than MaxNameLength.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLength:
		return fmt.Errorf("%w: %d bytes, above the maximum %d", ErrInvalidName, len(name), MaxNameLength)
	case name[0] == '}':
		// The key's hash tag "{}" would be empty: Redis would hash each key
		// of the lock whole, and in a Cluster they would not share a slot.
		return fmt.Errorf("%w: %q starts with '}'", ErrInvalidName, name)
	}
	return nil
}

// WithBatchDepth sets how many round trips of lock calls (acquire, release,
// refresh, TTL) a Client keeps out to one Redis node at a time (default
// DefaultBatchDepth, 4). A call made while fewer are out leaves at once,
// alone: a lone caller pays one round trip, as with a plain command, and
// nothing waits on a timer. Calls made while depth are out queue, and leave
// together in one pipeline as soon as one comes back. Redis then answers many
// calls per system call, which is most of its cost for small scripts: under
// load the Client needs less of Redis's CPU per lock, and its callers wait
// less for a pooled connection.
//
// What a batched call keeps: its own reply, go-redis' routing and redirects
// in a Cluster, the NOSCRIPT fallback, and go-redis' retries (a call
// answered LOADING, READONLY, TRYAGAIN and the like goes again alone). A
// call still queued when its context ends is never sent; one already on its
// way stops waiting at its context's end, its outcome unknown (an acquire
// then gives its token back, as after a lost reply). A call queued for
// 20 ms (the round trips out have stalled) goes alone.
//
// What changes for hooks: batched calls pass through the pipeline hook
// (redis.Hook's ProcessPipelineHook), not ProcessHook, and a pipeline runs
// on the context of the call that leads it, so a tracing hook sees its trace
// ids. 0 turns batching off: every call is its own round trip, as go-redis
// sends it.
func WithBatchDepth(depth int) Option {
	return optionFunc(func(c *config) {
		if depth < 0 {
			c.fail(fmt.Errorf("%w: batch depth %d is negative (0 turns batching off)", ErrInvalidOption, depth))
			return
		}
		c.batchDepth = depth
	})
}
