package dlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/node"
)

// WithDurableGrant makes an acquisition wait until the grant is on the
// primary's disk (Redis WAITAOF), at most timeout, and every renewal of the
// lock too: a primary that crashes and restarts from its append-only file
// then remembers the lock and the lease its holder counts on. With
// WithReplicas(n, …) as well, the grant's WAITAOF also waits for n
// replicas' AOFs, within the longer of the two timeouts; renewals wait for
// the primary's disk only (a replica promoted with a shorter lease than
// the holder counts on is the failover limit WithReplicas documents).
//
// A grant the server does not confirm in time is released at once, as
// WithReplicas does: a single attempt (TryAcquire, WithWait(0)) fails with
// ErrNotDurable; a waiting Acquire tries again, with a fresh token and a
// growing pause, until its wait ends. A renewal not confirmed does not extend
// the lease: it is tried again, and the lock is lost when its lease ends
// unconfirmed. Refresh returns ErrNotDurable then.
//
// It is accepted only where WAITAOF stands for an fsync, which the Client
// asks the server before the first durable acquisition (and waits for,
// unlike other acquisitions): WAITAOF (Redis 7.2 or newer, Valkey), AOF on,
// and appendfsync always, or everysec on Redis 8.0 or newer. Every Valkey
// release so far, and Redis 7.2 to 7.4, answer WAITAOF under everysec before
// the fsync (redis/redis#13793): a crash then still loses grants it
// confirmed, so there the option is refused with ErrUnsupportedServer, as
// it is on a server without WAITAOF, with AOF off, or one that will not show
// appendonly and appendfsync (CONFIG GET). Under appendfsync always every
// grant is on disk before its reply anyway; the option then adds the
// replicas' disks (with WithReplicas), and an error instead of a silent
// loss when AOF is turned off later: the server refuses WAITAOF, the grant
// is given back, and the acquisition ends at once with an ErrNotDurable
// that says so.
//
// The Client checks the server once and keeps the verdict for its life:
// appendfsync changed to everysec afterwards (CONFIG SET, a restart with
// another config file, a failover to a replica set up otherwise) is not
// seen, and WAITAOF's answers are then taken at their word. Keep the
// persistence settings of every server a Client may reach the same, or
// make a new Client after changing them.
//
// The timeout follows WithReplicas' rule against the client's ReadTimeout,
// and is at most a third of the TTL: each renewal, a third of the TTL after
// the last lease, may wait that long for the disk. With WithReplicas, a
// replica confirms a write on its disk at its next acknowledgement, about
// once a second: give the timeout a second or more.
// It needs a client of one server (standalone or Sentinel): on a Cluster
// client it is refused with ErrInvalidOption, since renewals there are
// pipelined through the ClusterClient, whose WAITAOF would go to any node.
// Redlock refuses it.
//
// The cost: with always, none beyond a round trip's WAITAOF; under everysec
// on Redis 8, a wait for the next fsync (up to a second) on every
// acquisition and renewal, so give it a timeout of about a second and a
// TTL several times that.
func WithDurableGrant(timeout time.Duration) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.durable = timeout })
}

// waits reports whether a grant is confirmed by a wait after the script:
// WAIT for WithReplicas, WAITAOF for WithDurableGrant.
func (ac acquireConfig) waits() bool { return ac.replicas > 0 || ac.durable > 0 }

// DurableError tells what WAITAOF confirmed of a new lock (WithDurableGrant)
// when it was not all that was asked. It matches ErrNotDurable.
type DurableError struct {
	// Local: the primary's AOF had the grant on disk.
	Local bool
	// Acked of Want replicas' AOFs had it (WithReplicas); Want is 0
	// without it.
	Acked   int64
	Want    int
	Timeout time.Duration
	// Refused is the server's reply when it refused WAITAOF (AOF off, or
	// an ACL without the command): no later attempt is confirmed either.
	Refused    string
	releaseErr error // releasing the unconfirmed lock failed too
}

func (e *DurableError) Error() string {
	var what string
	switch {
	case strings.HasPrefix(e.Refused, "NOPERM"):
		what = fmt.Sprintf("the server refused WAITAOF to this client's user (%s); allow it the command (ACL SETUSER <user> +waitaof)", e.Refused)
	case e.Refused != "":
		what = fmt.Sprintf("the server refused WAITAOF (%s); turn appendonly on (CONFIG SET appendonly yes, and in its config file)", e.Refused)
	case !e.Local:
		what = fmt.Sprintf("the primary did not confirm the grant on its disk within %v", e.Timeout)
	default:
		what = fmt.Sprintf("%d of %d replicas confirmed the grant on their disks within %v", e.Acked, e.Want, e.Timeout)
	}
	if e.releaseErr != nil {
		return fmt.Sprintf("dlock: not durable: %s; releasing the lock failed too (%v), it expires with its TTL", what, e.releaseErr)
	}
	return "dlock: not durable: " + what + "; lock released"
}

// Is makes errors.Is(err, ErrNotDurable) true.
func (e *DurableError) Is(target error) bool { return target == ErrNotDurable }

// Unwrap returns the error of releasing the unconfirmed lock, if that failed.
func (e *DurableError) Unwrap() error { return e.releaseErr }

// notDurable is the error for a grant WAITAOF did not confirm: a server
// without WAITAOF is unsupported for the option; any other answer is a
// *DurableError.
func (c *Client) notDurable(ac acquireConfig, ack waitAck, releaseErr error) error {
	if ack.refused != nil && unknownCommand(ack.refused) {
		err := c.noWaitAOF()
		if releaseErr != nil {
			return fmt.Errorf("%w; releasing the lock failed too (%v), it expires with its TTL", err, releaseErr)
		}
		return err
	}
	e := &DurableError{Local: ack.local, Acked: ack.replicas, Want: ac.replicas, Timeout: max(ac.durable, ac.replicaWait), releaseErr: releaseErr}
	if ack.refused != nil {
		e.Refused = ack.refused.Error()
	}
	return e
}

// unknownCommand reports whether a server refused a command it does not
// have: by the error code alone, as servers word the rest differently.
func unknownCommand(err error) bool {
	// HasErrorPrefix looks past the ERR code.
	return redis.HasErrorPrefix(err, "unknown command") || redis.HasErrorPrefix(err, "Unknown command")
}

// noWaitAOF is the refusal of WithDurableGrant on a server without WAITAOF,
// naming the server when the Client's check has heard it.
func (c *Client) noWaitAOF() error {
	server := "this server"
	if v := c.server.verdict.Load(); v != nil && v.server != "" {
		server = v.server
	}
	return fmt.Errorf("%w: WithDurableGrant needs WAITAOF, which %s does not have (Redis 7.2 or newer, or Valkey, has it)", ErrUnsupportedServer, server)
}

// checkDurable refuses WithDurableGrant where it cannot be kept: a
// timeout below 1ms or one go-redis' read timeout would cut short, a
// Cluster client, a server whose WAITAOF does not stand for an fsync
// (durableVerdict).
func (c *Client) checkDurable(ctx context.Context, ac acquireConfig) error {
	if ac.durable == 0 {
		return nil
	}
	if _, ok := c.rdb.(*redis.Client); !ok {
		return fmt.Errorf("%w: WithDurableGrant needs a client of one server (standalone or Sentinel), not %T", ErrInvalidOption, c.rdb)
	}
	if err := c.checkWaitRoom("WithDurableGrant", fmt.Sprint(ac.durable), ac.durable); err != nil {
		return err
	}
	// Unlike other acquisitions, a durable one waits for the server check
	// (once per Client): whether WAITAOF means what it says is the
	// server's to tell (durableVerdict), and a grant confirmed by a WAITAOF
	// that answers early is the false assurance the option exists to
	// avoid. Only clients of one server get here, so no hung Cluster
	// primary holds it up.
	// A server that does not answer now may answer within the
	// acquisition's wait, as an outage is ridden out by the attempts; the
	// checks are bounded by that wait (prepare takes what they used off
	// it). Without a wait, one check on the caller's context, as before.
	deadline := time.Now().Add(ac.wait)
	for backoff := 20 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		if err := c.checkUsable(ctx); err != nil {
			return err
		}
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if ac.wait > 0 {
			cctx, cancel = context.WithDeadline(ctx, deadline)
		}
		_ = c.checkServer(cctx)
		cancel()
		if v := c.server.verdict.Load(); v != nil {
			return v.durable
		}
		if err := c.checkUsable(ctx); err != nil {
			return err
		}
		if time.Now().Add(backoff).After(deadline) {
			return fmt.Errorf("%w: WithDurableGrant: the server did not answer its check (INFO, CONFIG GET appendfsync, COMMAND INFO WAITAOF)", ErrUnavailable)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// durableWithinTTL refuses a durable timeout above a third of the TTL of a
// renewed lock: a renewal leaves every third of the TTL and waits up to the
// timeout for the disk, and a longer wait lets the lease run out while the
// renewal that would extend it is still waiting. An acquisition checks it,
// and so does a Refresh, whose TTL later renewals use.
func durableWithinTTL(durable, ttl time.Duration) error {
	if durable <= ttl/3 {
		return nil
	}
	return fmt.Errorf("%w: WithDurableGrant(%v) is more than a third of the TTL %v: each renewal, every third of the TTL, waits up to that for the disk; wait at most %v or lengthen the TTL",
		ErrInvalidOption, durable, ttl, (ttl / 3).Truncate(time.Millisecond))
}

// refreshDurable is Refresh's script with WAITAOF after it on one
// connection: ok only when the refresh ran and is on the primary's disk.
func (l *redisLock) refreshDurable(ctx context.Context, ttl time.Duration) (bool, error) {
	var wait *redis.Cmd
	reply := node.Pipeline(ctx, l.c.rdb, []node.Call{node.Refresh(l.keys, l.token, ttl)}, func(pipe redis.Pipeliner) {
		wait = pipe.Do(ctx, "WAITAOF", 1, 0, ms(l.durable))
	})[0]
	ok, err := reply.Int64()
	if err != nil || ok != 1 {
		return false, err
	}
	if local, _ := node.WaitAOF(wait); local < 1 {
		why := fmt.Sprintf("the primary did not confirm it on its disk within %v", l.durable)
		if isServerReply(wait.Err()) {
			why = fmt.Sprintf("the server refused WAITAOF (%v)", wait.Err())
		}
		return false, fmt.Errorf("%w: refresh ran, but %s: the lease was not extended", ErrNotDurable, why)
	}
	return true, nil
}
