package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/node"
)

// WithReplicas makes an acquisition wait until n replicas acknowledged the
// new lock (Redis WAIT), at most timeout; with fewer acknowledgements the
// lock is released at once. A single attempt (TryAcquire, WithWait(0))
// then fails with ErrNotReplicated; a waiting Acquire tries again, with a
// fresh token and a growing pause, as through an outage (replicas lag, or
// resync after a failover), and when its wait ends first, its error
// matches both ErrNotObtained and ErrNotReplicated and says how many
// acknowledged.
//
// The trade-off: every acquisition waits a replication round trip, and fails
// when replicas lag or are down. In exchange a failover right after the
// acquisition does not promote a replica that never saw the lock — the
// window in which asynchronous replication can give the lock to two holders
// narrows to writes lost after the acknowledgement. Renewals are not
// confirmed this way.
//
// timeout must leave max(100ms, ReadTimeout/10) of the redis client's
// ReadTimeout free: with no acknowledgement WAIT answers only after timeout
// ends, when Redis' event loop next looks, and a read that times out first
// reports neither the count nor the grant. Such a timeout is refused with
// ErrInvalidOption when the lock is acquired. Whenever the
// pipeline fails after the script may have run, the grant is given back by
// token.
//
// In a Cluster the script and WAIT go to the lock's primary together, and
// its MOVED, ASK and TRYAGAIN answers are followed as go-redis follows them
// for a plain command, within ClusterOptions.MaxRedirects.
func WithReplicas(n int, timeout time.Duration) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.replicas, c.replicaWait = n, timeout })
}

// checkReplicaWait refuses a replica wait that go-redis' read timeout would
// cut short (see checkWaitRoom).
func (c *Client) checkReplicaWait(ac acquireConfig) error {
	if ac.replicas == 0 {
		return nil
	}
	return c.checkWaitRoom("WithReplicas", fmt.Sprintf("%d, %v", ac.replicas, ac.replicaWait), ac.replicaWait)
}

// checkWaitRoom refuses a WAIT or WAITAOF timeout wait (of option, given
// args) that go-redis' read timeout would cut short (see replicaWaitRoom).
// Either answers only when its timeout ends, so with no acknowledgement
// the reply comes after the read timeout: go-redis reports an i/o timeout
// instead of the count and re-sends script and wait (a pipeline is retried
// after a timeout), and the caller waits several read timeouts for an
// error, where it asked for a short one. A warning would be read after the
// first incident; refused at the first acquisition, the mistake shows in
// the first test run, with both values.
func (c *Client) checkWaitRoom(option, args string, wait time.Duration) error {
	var rt time.Duration
	switch r := c.rdb.(type) {
	case *redis.Client: // standalone or Sentinel
		rt = r.Options().ReadTimeout
	case *redis.ClusterClient: // its node clients read with the same
		rt = r.Options().ReadTimeout
	}
	// 0 or below after go-redis filled its defaults: no read deadline.
	// Other clients (a Ring, a wrapper) are not checked: their options
	// are not filled in where dlock can read them.
	if rt > 0 && wait > rt-replicaWaitRoom(rt) {
		return fmt.Errorf("%w: %s(%s) leaves less than %v below the client's read timeout %v: the read would time out before Redis answers; wait at most %v or raise the redis client's ReadTimeout",
			ErrInvalidOption, option, args, replicaWaitRoom(rt), rt, rt-replicaWaitRoom(rt))
	}
	return nil
}

// replicaWaitRoom is the room a replica wait must leave below the read
// timeout rt: Redis answers a WAIT that timed out only when its event loop
// next looks (up to 1000/hz ms later, 100 ms at the default hz 10), after
// the script ran, and the reply still has to travel. A wait of 399 ms under
// a 400 ms read timeout ended in an i/o timeout 3 times of 3, 380 ms once
// of 3 (TestWithReplicasAcceptedWaitEndsInRedisAnswer).
func replicaWaitRoom(rt time.Duration) time.Duration {
	return max(100*time.Millisecond, rt/10)
}

// refreshWithWait refreshes a handed-over lock and waits for replicas in one
// pipeline, as sendAcquire does for an acquisition.
func (c *Client) refreshWithWait(ctx context.Context, l *redisLock, ac acquireConfig) (waitAck, error) {
	sent := time.Now()
	res, ack, err := c.withWait(ctx, l.keys.Lock, ac, node.Refresh(l.keys, l.token, ac.ttl))
	if err != nil {
		return ack, opError("acquire", l.name, redisError(err))
	}
	if n, _ := res.(int64); n != 1 {
		return ack, opError("acquire", l.name, ErrNotHeld)
	}
	if !l.confirm(sent, ac.ttl, false, false) {
		return ack, opError("acquire", l.name, ErrNotHeld)
	}
	return ack, nil
}

// withWait sends call and WAIT (or, with WithDurableGrant, WAITAOF) in one
// pipeline on the connection of key's node, and returns the call's reply and
// what the wait confirmed.
//
// In a Cluster the pipeline goes to one node client, not through the
// ClusterClient (which would send the script alone to a new node after a
// redirect, and WAIT to the old one), so redirects are followed here, as
// go-redis follows them for a plain command and with its bound
// (ClusterOptions.MaxRedirects, 3 by default): MOVED, ASK and TRYAGAIN
// mean the node refused the script before running it, so the whole
// pipeline is sent again: to the node a reloaded slot map names after
// MOVED, to the importing node with ASKING after ASK, to the same node
// after a short wait after TRYAGAIN (a slot in migration with only some of
// the script's keys on the node). Sending the same token again is safe in
// any case: the script counts a lock already ours as granted. All on ctx.
func (c *Client) withWait(ctx context.Context, key string, ac acquireConfig, call node.Call) (any, waitAck, error) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return sendWithWait(ctx, c.rdb, ac, call)
	}
	primary, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, waitAck{}, err
	}
	var conn redis.Cmdable = primary
	for redirects := 0; ; redirects++ {
		res, ack, err := sendWithWait(ctx, conn, ac, call)
		if err == nil {
			return res, ack, nil
		}
		if !isServerReply(err) {
			// A dead or unreachable primary: the next attempt should
			// find its successor, not wait for the reload interval.
			cc.ReloadState(ctx)
			return nil, waitAck{}, err
		}
		moved, ask, addr := redirected(err)
		again := redis.HasErrorPrefix(err, "TRYAGAIN")
		if (!moved && !ask && !again) || redirects >= cc.Options().MaxRedirects {
			return nil, waitAck{}, err
		}
		if again {
			t := time.NewTimer(16 * time.Millisecond << redirects)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, waitAck{}, errors.Join(err, ctx.Err())
			}
			continue
		}
		next, ferr := redirectTarget(ctx, cc, key, primary, ask, addr)
		if ferr != nil {
			return nil, waitAck{}, fmt.Errorf("%w (following it: %v)", err, ferr)
		}
		primary, conn = next, next
		if ask {
			conn = askingConn{next}
		}
	}
}

// waitAck is what the WAIT or WAITAOF after a grant confirmed.
type waitAck struct {
	replicas int64 // replicas that acknowledged (WAIT) or wrote to their AOF (WAITAOF)
	local    bool  // WAITAOF: the primary's own AOF has the grant on disk
	// refused is the server's refusal of WAITAOF (a server without it,
	// AOF off): nothing a later attempt cures.
	refused error
}

// sendWithWait is withWait on one connection.
func sendWithWait(ctx context.Context, conn redis.Cmdable, ac acquireConfig, call node.Call) (any, waitAck, error) {
	var wait *redis.Cmd // of the last pipeline sent
	reply := node.Pipeline(ctx, conn, []node.Call{call}, func(pipe redis.Pipeliner) {
		if ac.durable > 0 {
			wait = pipe.Do(ctx, "WAITAOF", 1, ac.replicas, ms(max(ac.durable, ac.replicaWait)))
		} else {
			wait = pipe.Do(ctx, "WAIT", ac.replicas, ms(ac.replicaWait))
		}
	})[0]
	if err := reply.Err(); err != nil {
		return nil, waitAck{}, err
	}
	// The script ran; a wait that failed confirmed nothing. Counting it as
	// no acknowledgement lets the caller release what the script granted
	// instead of stranding it.
	var ack waitAck
	if ac.durable > 0 {
		local, replicas := node.WaitAOF(wait)
		ack = waitAck{replicas: replicas, local: local >= 1}
		if waitAOFRefused(wait.Err()) && refusedForGood(ctx, conn, wait.Err()) {
			ack.refused = wait.Err()
		}
	} else {
		ack.replicas, _ = wait.Int64()
	}
	return reply.Val(), ack, nil
}

// waitAOFRefused tells a WAITAOF refusal that may be for good, by its error
// code only (the texts differ between servers): ERR (AOF off, a server
// without the command, or a replica: refusedForGood tells them apart) and
// NOPERM, an ACL that forbids it. Other replies (BUSY, LOADING, a
// failover's READONLY) are of a moment: the grant is unconfirmed, and a
// wait tries again.
func waitAOFRefused(err error) bool {
	if !isServerReply(err) {
		return false
	}
	code, _, _ := strings.Cut(err.Error(), " ")
	return code == "ERR" || code == "NOPERM"
}

// refusedForGood tells, of a WAITAOF refused with ERR or NOPERM
// (waitAOFRefused), whether a later attempt is refused too. NOPERM is an
// ACL, and an unknown command a server without WAITAOF: for good. ERR is
// also what Redis answers a replica's WAITAOF, which a failover's moment
// produces (the acquire script ran on the primary, the WAITAOF after it
// met the same server demoted) and the next attempt, on the new primary,
// cures; so an ERR counts as AOF off only when the server says so (INFO
// persistence), not by its wording, which differs between servers.
func refusedForGood(ctx context.Context, conn redis.Cmdable, err error) bool {
	if code, _, _ := strings.Cut(err.Error(), " "); code == "NOPERM" || unknownCommand(err) {
		return true
	}
	info, ierr := conn.Info(ctx, "persistence").Result()
	return ierr == nil && infoField(info, "aof_enabled") == "0"
}

// redirected reads a MOVED or ASK error reply: "MOVED 3999 127.0.0.1:6381".
func redirected(err error) (moved, ask bool, addr string) {
	if !isServerReply(err) {
		return false, false, ""
	}
	f := strings.Fields(err.Error())
	if len(f) != 3 {
		return false, false, ""
	}
	return f[0] == "MOVED", f[0] == "ASK", f[2]
}

// redirectTarget returns the node client to send to after a redirect away
// from the node client from. ForEachMaster reloads the slot map before it
// iterates (ReloadState only schedules a reload) and shows the primary at
// addr. After MOVED the reloaded map's primary for key is taken, or the
// one at addr if the node that answered the reload still had the old view;
// after ASK (the slot in migration, the map right) the one at addr.
func redirectTarget(ctx context.Context, cc *redis.ClusterClient, key string, from *redis.Client, ask bool, addr string) (*redis.Client, error) {
	var mu sync.Mutex
	var atAddr *redis.Client
	err := cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
		if n.Options().Addr == addr {
			mu.Lock()
			atAddr = n
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !ask {
		if target, err := cc.MasterForKey(ctx, key); err == nil && target != from {
			return target, nil
		}
	}
	if atAddr == nil || atAddr == from {
		return nil, fmt.Errorf("no other primary at %s in the reloaded slot map", addr)
	}
	return atAddr, nil
}

// askingConn sends ASKING first in every pipeline, so that the node
// importing a slot serves the script that follows it.
type askingConn struct{ *redis.Client }

func (a askingConn) Pipeline() redis.Pipeliner {
	p := a.Client.Pipeline()
	p.Do(context.Background(), "ASKING")
	return p
}

// confirmed reports whether ack is all that ac asked for.
func (ack waitAck) confirmed(ac acquireConfig) bool {
	if ac.durable > 0 && (ack.refused != nil || !ack.local) {
		return false
	}
	return ack.replicas >= int64(ac.replicas)
}

// checkReplicated releases a lock whose grant the wait did not confirm:
// too few replicas acknowledged it, or (WithDurableGrant) it is not on the
// disks asked for, or the server refused to say.
func (c *Client) checkReplicated(ctx context.Context, l *redisLock, ac acquireConfig, ack waitAck) error {
	if ack.confirmed(ac) {
		return nil
	}
	var releaseErr error
	if err := l.releaseOrGiveBack(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
		releaseErr = err
	}
	if ac.durable > 0 {
		return opError("acquire", l.name, c.notDurable(ac, ack, releaseErr))
	}
	return opError("acquire", l.name, &ReplicaError{Acked: ack.replicas, Want: ac.replicas, Timeout: ac.replicaWait, releaseErr: releaseErr})
}
