package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/node"
)

// WithDurableGrant makes an acquisition wait until the grant is on the
// primary's disk (Redis WAITAOF), at most timeout, and every renewal of the
// lock too: a primary that crashes and restarts from its append-only file
// then remembers the lock, where with appendfsync everysec (the common
// setting) it can forget the last second of grants and give the lock to a
// second holder. With WithReplicas(n, …) as well, WAITAOF also waits for n
// replicas' AOFs, within the longer of the two timeouts.
//
// A grant the server does not confirm in time is released at once, as
// WithReplicas does: a single attempt (TryAcquire, WithWait(0)) fails with
// ErrNotDurable; a waiting Acquire tries again, with a fresh token and a
// growing pause, until its wait ends. A renewal not confirmed does not extend
// the lease: it is tried again, and the lock is lost when its lease ends
// unconfirmed. Refresh returns ErrNotDurable then.
//
// It needs WAITAOF (Redis 7.2 or newer, Valkey 7.2 or newer) and appendonly
// yes on the primary (and the replicas counted). A server without WAITAOF
// is refused with ErrUnsupportedServer, naming it, before anything is sent
// once the Client has checked the server (its first acquisition starts the
// check), else at the first grant, which is given back; a server with AOF off
// refuses WAITAOF, and the grant is given back with an ErrNotDurable that
// says so. The timeout follows WithReplicas' rule against the client's
// ReadTimeout. It needs a client of one server (standalone or Sentinel): on
// a Cluster client it is refused with ErrInvalidOption, since renewals there
// are pipelined through the ClusterClient, whose WAITAOF would go to
// any node.
//
// The cost: every acquisition and renewal waits for an fsync (about a
// millisecond on a local SSD, far more on network disks).
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
	// Refused is the server's reply when it refused WAITAOF (AOF off):
	// no later attempt is confirmed either.
	Refused    string
	releaseErr error // releasing the unconfirmed lock failed too
}

func (e *DurableError) Error() string {
	var what string
	switch {
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
// timeout below 1ms, a Cluster client, a server the check found without
// WAITAOF; and a timeout go-redis' read timeout would cut short.
func (c *Client) checkDurable(ac acquireConfig) error {
	if ac.durable == 0 {
		return nil
	}
	if ac.durable < time.Millisecond {
		return fmt.Errorf("%w: WithDurableGrant(%v) needs a timeout of at least 1ms", ErrInvalidOption, ac.durable)
	}
	if _, ok := c.rdb.(*redis.Client); !ok {
		return fmt.Errorf("%w: WithDurableGrant needs a client of one server (standalone or Sentinel), not %T", ErrInvalidOption, c.rdb)
	}
	if v := c.server.verdict.Load(); v != nil && v.waitAOF != nil && !*v.waitAOF {
		return c.noWaitAOF()
	}
	return c.checkWaitRoom("WithDurableGrant", fmt.Sprint(ac.durable), ac.durable)
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
