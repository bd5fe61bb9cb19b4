// Package election elects one leader among candidates on a dlock.Locker,
// in the manner of etcd's concurrency.Election and client-go's
// leaderelection.
//
// # Model
//
// Leadership is a lock: the leader is the holder of the lock named after the
// election. Campaign waits for it in the lock's FIFO queue, so candidates
// lead in the order they lined up and a resignation hands leadership to the
// next candidate at once, with one message, without polling. The leader's
// lock is renewed by the Locker's renewal loop, and the Leadership's context
// ends when the lock is lost: before the lease runs out in Redis when
// renewals cannot get through, so a leader cut off from Redis stops before
// another can be elected.
//
// # Limits
//
// A leader is a lease holder, with the limits of one (see dlock's docs/contract.md):
// a leader process stopped longer than its lease (a GC pause, SIGSTOP, a VM
// migration) runs again believing it leads until its context notices, which
// it does at once, but after another candidate may have been elected. A
// lock force-unlocked by an operator hands leadership to the next candidate
// at once, and the old leader learns it at its next renewal, a third of the
// TTL later. Where two leaders for a moment would do harm, pass the
// Leadership's Fence to the resource and have it refuse smaller ones.
//
// Observing who leads (Leader, Observe, Callbacks.OnNewLeader) reads the
// lock's holder: it needs a Locker that implements Inspector (*dlock.Client
// and dlocktest's Locker do; redlock's does not). Observe polls: changes
// show up to one interval late (WithObserveInterval, default
// DefaultObserveInterval).
package election

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/inspect"
	"github.com/dlock-go/dlock/lockerkit"
)

// ErrNoLeader: nobody leads the election now.
var ErrNoLeader = errors.New("election: no leader")

// DefaultObserveInterval is how often Observe reads who leads, without
// WithObserveInterval.
const DefaultObserveInterval = time.Second

// campaignWait is the wait limit of each Acquire of a campaign: long, since a
// candidate whose wait ends leaves the queue and lines up again at its end.
// Campaign calls Acquire again when it passes; ctx ends the campaign.
const campaignWait = time.Hour

// Inspector reads the holder of a lock, as (*dlock.Client).Inspect does:
// an *dlock.Error matching dlock.ErrNotHeld when nobody holds it.
// *dlock.Client and *dlocktest.Locker implement it.
type Inspector interface {
	Inspect(ctx context.Context, name string) (inspect.LockInfo, error)
}

// owner is implemented by Lockers that say what owner text they store
// (*dlock.Client).
type owner interface{ Owner() string }

// An Option configures an Election.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	identity string
	ttl      time.Duration // 0: the Locker's default
	observe  time.Duration
	err      error // the first invalid option
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithIdentity sets this candidate's identity: the owner text of its lock
// while it leads (dlock.WithOwner), which Leader, Observe and the
// CLI's inspect show. Default: the Locker's owner text (the Client's
// WithDefaultOwner, "hostname/pid" by default), or "hostname/pid" for a Locker that
// does not tell it. Candidates sharing a Client need one each.
func WithIdentity(id string) Option {
	return optionFunc(func(c *config) {
		if id == "" {
			c.fail(fmt.Errorf("%w: empty identity", dlock.ErrInvalidOption))
			return
		}
		c.identity = id
	})
}

// WithTTL sets the lease of the leader's lock (dlock.WithTTL): how long a
// leader that died without resigning keeps the others waiting. Default: the
// Locker's default TTL. It is checked by the Locker at the first Campaign.
func WithTTL(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail(fmt.Errorf("%w: %v is not positive", dlock.ErrInvalidTTL, d))
			return
		}
		c.ttl = d
	})
}

// WithObserveInterval sets how often Observe (and Run, for OnNewLeader)
// reads who leads (default DefaultObserveInterval). At least 10ms.
func WithObserveInterval(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 10*time.Millisecond {
			c.fail(fmt.Errorf("%w: observe interval %v is below 10ms", dlock.ErrInvalidOption, d))
			return
		}
		c.observe = d
	})
}

// Election is one candidate's handle on an election: a lock name on a
// Locker. It is safe for concurrent use, but one candidate campaigns once
// at a time: a second Campaign under a Leadership's context is refused
// (dlock.ErrReentrant), and a second one elsewhere is a second candidate
// with the same identity.
type Election struct {
	locker dlock.Locker
	name   string
	cfg    config
}

// New returns the candidate identity (WithIdentity) of the election name on
// locker. Candidates of one election use the same name and the same kind of
// Locker on the same Redis. Bad input gives an *dlock.Error of Op "new
// election" matching dlock.ErrInvalidName, dlock.ErrInvalidTTL or
// dlock.ErrInvalidOption.
func New(locker dlock.Locker, name string, opts ...Option) (*Election, error) {
	cfg := config{observe: DefaultObserveInterval}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if locker == nil {
		cfg.fail(fmt.Errorf("%w: nil Locker", dlock.ErrInvalidOption))
	}
	// The Locker's rules for names, before anything is sent.
	if _, err := lockerkit.ReadAcquireOptions(name, lockerkit.DefaultTTLBounds); err != nil {
		cfg.err = errors.Unwrap(err) // the name's error first: it is what New names
	}
	if cfg.err != nil {
		return nil, &dlock.Error{Op: "new election", Name: name, Err: cfg.err}
	}
	if cfg.identity == "" {
		if o, ok := locker.(owner); ok && o.Owner() != "" {
			cfg.identity = o.Owner()
		} else {
			host, _ := os.Hostname()
			cfg.identity = host + "/" + strconv.Itoa(os.Getpid())
		}
	}
	return &Election{locker: locker, name: name, cfg: cfg}, nil
}

// Name returns the election's lock name.
func (e *Election) Name() string { return e.name }

// Identity returns this candidate's identity.
func (e *Election) Identity() string { return e.cfg.identity }

// Leadership is a candidate's term as leader: the lock it holds. It ends
// when it is lost or resigned.
type Leadership struct {
	lock     dlock.Lock
	identity string
}

// Context returns the leadership's context: it ends when the leadership
// does, resigned (a cause matching dlock.ErrReleased) or lost (one matching
// dlock.ErrLockLost), before the lease runs out in Redis. Run the leader's
// work under it.
func (l *Leadership) Context() context.Context { return l.lock.Context() }

// Fence returns the leadership's fencing token: it grows with every new
// leader. Pass it to what the leader writes, and have writes with a smaller
// one refused: that stops a leader that went on after its term ended.
func (l *Leadership) Fence() int64 { return l.lock.Fence() }

// Identity returns the leader's identity.
func (l *Leadership) Identity() string { return l.identity }

// Lock returns the lock behind the leadership.
func (l *Leadership) Lock() dlock.Lock { return l.lock }

// Resign ends the leadership: the lock is released and handed to the next
// candidate in line at once. It reports an error matching dlock.ErrNotHeld
// when the leadership had ended already (lost, or resigned before).
func (l *Leadership) Resign(ctx context.Context) error { return l.lock.Release(ctx) }

// Campaign waits until this candidate leads, then returns its Leadership.
// It waits in the lock's FIFO queue (Locker.Acquire), renewed while it
// waits, and lines up again when a wait limit passes, until ctx ends. A
// failure to reach Redis is retried with backoff (100ms doubling to 2s)
// until ctx ends; bad input, a closed Locker, and ErrReentrant (ctx carries
// this election's Leadership already) end the campaign at once. When ctx
// ends first, the error matches ctx's error (and dlock.ErrNotObtained when
// it ended a wait).
func (e *Election) Campaign(ctx context.Context) (*Leadership, error) {
	opts := []dlock.AcquireOption{dlock.WithOwner(e.cfg.identity), dlock.WithWait(campaignWait)}
	if e.cfg.ttl > 0 {
		opts = append(opts, dlock.WithTTL(e.cfg.ttl))
	}
	backoff := 100 * time.Millisecond
	for {
		l, err := e.locker.Acquire(ctx, e.name, opts...)
		switch {
		case err == nil:
			return &Leadership{lock: l, identity: e.cfg.identity}, nil
		case ctx.Err() != nil:
			return nil, withCtxErr(ctx, err)
		case final(err):
			return nil, err
		case errors.Is(err, dlock.ErrNotObtained):
			// The wait limit passed (or a grant came too late to use):
			// straight back in line.
			backoff = 100 * time.Millisecond
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, withCtxErr(ctx, err)
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// withCtxErr makes err match ctx's error, which ended the campaign.
func withCtxErr(ctx context.Context, err error) error {
	if errors.Is(err, ctx.Err()) {
		return err
	}
	return errors.Join(err, ctx.Err())
}

// final reports errors that trying again cannot cure.
func final(err error) bool {
	for _, target := range []error{dlock.ErrClosed, dlock.ErrInvalidName, dlock.ErrInvalidTTL, dlock.ErrInvalidOption,
		dlock.ErrReentrant, dlock.ErrWrongType, dlock.ErrUnsupportedServer} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// LeaderInfo says who leads an election.
type LeaderInfo struct {
	// Identity is the leader's (WithIdentity); empty in Observe's report
	// that nobody leads.
	Identity string
	// Since is when this leader's term began, on the Redis server's clock
	// (the Locker's clock for dlocktest).
	Since time.Time
	// Fence is the leadership's fencing token: a new term has a larger one,
	// even when the same candidate leads again.
	Fence int64
}

// String reads as a log line wants it: `"node-2" leads since
// 2026-12-02T10:00:00Z (fence 1796…)`, or "nobody leads".
func (i LeaderInfo) String() string {
	if i.Identity == "" {
		return "nobody leads"
	}
	return fmt.Sprintf("%q leads since %s (fence %d)", i.Identity, i.Since.UTC().Format(time.RFC3339), i.Fence)
}

// Leader returns who leads now. Nobody leading gives an error matching
// ErrNoLeader; a Locker that is not an Inspector one matching
// errors.ErrUnsupported.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	in, ok := e.locker.(Inspector)
	if !ok {
		return LeaderInfo{}, &dlock.Error{Op: "leader", Name: e.name,
			Err: fmt.Errorf("%w: a %T cannot tell who holds a lock (it is no election.Inspector)", errors.ErrUnsupported, e.locker)}
	}
	info, err := in.Inspect(ctx, e.name)
	if errors.Is(err, dlock.ErrNotHeld) {
		return LeaderInfo{}, &dlock.Error{Op: "leader", Name: e.name, Err: ErrNoLeader}
	}
	if err != nil {
		return LeaderInfo{}, err
	}
	return LeaderInfo{Identity: info.Owner, Since: info.Since, Fence: info.Fence}, nil
}

// Observe reports who leads: first who leads now, then every change, as
// LeaderInfo values on the channel; a LeaderInfo with an empty Identity
// says nobody leads. A change is a new term (a new Fence), also of the same
// candidate. It polls Leader every WithObserveInterval (default
// DefaultObserveInterval, 1s), so it reports a change up to one interval
// late, and can miss a term shorter than that; a failed read (Redis
// unreachable) reports nothing and is tried at the next tick.
//
// The channel is closed when ctx ends: its goroutine ends then, so the
// caller ends it by cancelling ctx, and waits for it by reading the channel
// to its end. A Locker that is not an Inspector gives an error matching
// errors.ErrUnsupported, and no channel.
func (e *Election) Observe(ctx context.Context) (<-chan LeaderInfo, error) {
	if _, ok := e.locker.(Inspector); !ok {
		_, err := e.Leader(ctx) // the error that says so
		return nil, err
	}
	ch := make(chan LeaderInfo)
	go func() {
		defer close(ch)
		tick := time.NewTicker(e.cfg.observe)
		defer tick.Stop()
		var last LeaderInfo
		first := true
		for {
			cur, err := e.Leader(ctx)
			if err == nil || errors.Is(err, ErrNoLeader) {
				if first || cur.Fence != last.Fence || cur.Identity != last.Identity {
					select {
					case ch <- cur:
					case <-ctx.Done():
						return
					}
					last, first = cur, false
				}
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}
