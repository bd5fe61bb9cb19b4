// Package redlock takes dlock's locks on a majority of independent Redis
// primaries (the Redlock algorithm), so that a lock survives the loss of a
// minority of them.
//
// # Model
//
// A Redlock (one per process, made by New over N clients) hands out Locks.
// An acquisition sends the acquire script with one random token to every
// node at once and holds the lock when a quorum (N/2 + 1) granted it within
// its validity: the TTL less the time the attempt took and a margin (a
// tenth of the TTL, the single-node lock's lease margin, which covers the
// Redlock algorithm's clock drift allowance of TTL/100 + 2ms). It returns as soon as a quorum granted or can
// no longer grant, without waiting for slow nodes; a grant that arrives
// later joins the lock, or is given back when the lock has failed or ended.
//
//	r, err := redlock.New([]redis.UniversalClient{a, b, c})
//	lock, err := r.Acquire(ctx, "order:42", dlock.WithTTL(10*time.Second))
//	if errors.Is(err, dlock.ErrNotObtained) { /* busy */ }
//	defer lock.Release(context.WithoutCancel(ctx))
//
// Redlock implements dlock.Locker and its Lock implements dlock.Lock, with
// the same options, errors (*dlock.Error naming the operation and the lock,
// the dlock sentinels, ErrNoQuorum for failing nodes) and observer events
// as a dlock.Client, so code, dlockprom and dlockotel written for one work
// with the other. The keys and scripts on each node are the core's
// (internal/node), under the same prefix.
//
// A lock held elsewhere is reported busy (dlock.ErrNotObtained), and
// Acquire keeps waiting, whenever the nodes that failed leave a quorum
// reachable; ErrNoQuorum only when failed nodes make a quorum impossible.
// Acquire waits out that too when the nodes are unreachable or cannot serve
// for now (dlock.ErrUnavailable): a wait that ends during such an outage
// matches dlock.ErrNotObtained, ErrNoQuorum and dlock.ErrUnavailable.
// Waiting polls with jittered backoff: Redlock does not join the core's
// waiter queues.
//
// # Renewal
//
// A Lock is renewed on all its nodes at a third of its TTL, and no later
// than halfway to the end of its validity. The Redlock's locks share one
// renewal loop (the lease engine's, as a dlock.Client's locks do), which
// sends the renewals due on one node together, in one pipeline of that
// node's lane: no goroutine per held lock. A renewal (or Refresh) succeeds
// as soon as a quorum confirmed, so a stalled node does not hold it up; the
// others answer in the background. After a failure the next try comes soon,
// with backoff (a thirtieth of the TTL, doubling), not a third of the TTL
// later. Once a quorum confirmed, a node that no longer holds the lock
// (restarted empty, or that never granted it) is taken again where the lock
// is free there (extend-or-lock, as redsync does), with a new fence, which
// replaces that node's in Fences, and Fence written back into its counter: a
// quorum does not erode one restart at a time. Such a node does not count
// towards the quorum of the renewal that took it again, only from the next
// renewal on, when it confirms like any other node. A node where the token
// was force-unlocked (dlock.Client.ForceUnlock, one node at a time) is never
// taken again, so a forced unlock of a majority of the nodes ends the lock
// at the next renewal; a node where only the acquisition's attempt was
// withdrawn (its reply lost, a node stalled) is. The context ends when no
// renewal reached a quorum before the validity ran out, or a majority of
// the nodes no longer hold it; the token is then given up on every node, in
// the background.
//
// # Release
//
// Release (and Close) releases by token on every node, not only on those
// whose grant was heard of: a grant whose reply was lost or is still on the
// way is freed too, and a late attempt grants nothing. It returns once a
// quorum released, leaving slower nodes to the background, within the
// release timeout; Close waits for them. A majority answering "not ours"
// gives dlock.ErrNotHeld, and ErrReleasedLate too when too few of them said
// so within the validity to make a majority: the leases of the others may
// have ended while the release waited for them. An acquisition that fails
// gives its token up the same way on the nodes that granted and on those not
// heard from.
//
// # The deadline
//
// The holder learns of the end of its lease before the nodes' leases end,
// whatever the network does:
//   - the validity is dated from the send time of the command that a quorum
//     confirmed (the acquisition, then a renewal or Refresh), less the
//     margin; the nodes' leases start when the command arrives, later;
//   - a timer of the lock's own ends its context when the validity runs
//     out, independent of any request still out (a stopped node holds a
//     renewal for go-redis' ReadTimeout, 3s by default);
//   - only a refresh that a quorum confirmed moves the validity, dated from
//     that refresh's send; nodes never shorten a lease, so replies that
//     cross cannot leave the validity past a node's lease; and a
//     confirmation that arrives after the context ended revives nothing;
//   - Release and Close end the context before asking any node: the nodes
//     that answer free their keys at once, while a stopped one may keep the
//     release waiting for seconds.
//
// # Fencing
//
// Fence grows with every acquisition of a name, as dlock.Lock's contract
// has it, also across holders whose quorums differ: it is the largest of the
// fences the granting nodes handed out, written back into the fence counter
// of a quorum of them before the lock is handed out (a second round, one
// round trip to the nodes that granted), so the next holder, whose quorum
// shares a node with that one, gets a larger fence there. The nodes' own
// fences (Fences) are not comparable with each other: each node's counter
// is seeded by its own clock. A resource can also fence node by node: it
// refuses a write if, for any node the writer was granted on, its fence is
// below the largest fence it has accepted from that node, and refuses
// fences of fewer than a quorum of nodes (FenceSet). Refusing only when no
// node's fence is the largest seen admits a stale holder.
//
// # Goroutines
//
// Every goroutine a Redlock starts (attempts still out after the verdict,
// the renewal loop and a sender per node while its renewals are out,
// re-takes, the nodes a release left to the background, grants being given
// back) belongs to it, and each is bounded by a validity or the release
// timeout: Close releases what is held, ends every Lock's context and waits
// for them all. A held lock itself runs none: its validity has a timer, and
// its renewals are entries in the loop's heap.
//
// # Limits
//
// Redlock is a trade-off, not a cure. It assumes bounded clock drift and
// process pauses like any lease. A node restarted empty forgets the locks it
// held, while the holder's validity runs on (a renewal without a quorum
// fails, it does not end the lock): as long as a quorum of the nodes still
// holds the lock no second holder gets in, and a renewal takes the lock
// again on the restarted node; once fewer do, a second holder can take the
// restarted nodes and those the lock lacked. A lock granted by a bare
// quorum (the other nodes were busy, down or slow, and no renewal has taken
// them since), or on a node whose keys expired while it was stopped, gets
// there with one restart; any lock with the restart of a quorum. Run nodes
// with persistence (appendfsync always), or restart them only after the
// longest TTL: by then every validity that counted on the node has ended.
// The torture suite's node faults follow that rule. Lock has
// no hold limit (WithMaxHold is refused), and WithReplicas does not apply to
// independent primaries (refused too); nor are read locks (WithShared).
package redlock
