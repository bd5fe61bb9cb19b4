package redlock

import (
	"errors"
	"fmt"
	"slices"
)

// ErrStaleFence: a protected resource refused a write, because the fences it
// carries cannot show that it comes from the lock's current holder (see
// FenceSet).
var ErrStaleFence = errors.New("redlock: stale fence")

// FenceSet is what a resource protected by a Redlock keeps to refuse stale
// holders by their Fences, node by node: the largest fence it has accepted
// from each node, in the nodes' order (the order of the clients given to
// New, which is the order of Lock.Fences). The zero value has accepted
// nothing. Keep it with the resource (a row, a file) and update it in the
// same transaction as the write it admits; a resource written in another
// language applies the same rule (Admit). Lock.Fence, one number, is the
// simpler token; a FenceSet does not depend on the fence a lock writes back
// to a quorum when it is acquired, only on each node's own counter.
//
// Why per node: each node's fences grow with every grant of a name there,
// but different nodes' fences are not comparable (each starts from its own
// counter and clock), and two holders need not share more than one node. Any
// two quorums share a node, and there the later holder's fence is the
// larger: so once the resource has accepted a write of the later holder, a
// write of the earlier one is below it on that node. A rule that admits a
// write when some node's fence is the largest seen from that node (what
// Fences documented before) admits the stale holder: holder 1 granted on
// nodes {A, B} with fences [1001, 11, -], holder 2 on {B, C} with
// [-, 12, 12]; after holder 2 wrote, holder 1 is still the largest on A, and
// below it only on B.
type FenceSet []int64

// Admit checks a write that carries fences (the writer's Lock.Fences, taken
// when the write is made) and returns the set to keep with the write. It
// refuses, with an error matching ErrStaleFence, when for any node that
// granted the writer's lock (fence not 0) the fence is below the largest
// this set has accepted from that node; and when fences are not a lock's:
// fewer than a quorum of nodes (len(fences)/2 + 1) granted, or another
// number of nodes than the set has seen. An equal fence is admitted: the
// same holder writes again. s is not changed.
func (s FenceSet) Admit(fences []int64) (FenceSet, error) {
	n := len(fences)
	if len(s) != 0 && len(s) != n {
		return s, fmt.Errorf("%w: fences of %d nodes, the resource keeps fences of %d: the writers' Redlocks differ", ErrStaleFence, n, len(s))
	}
	granted := 0
	for _, f := range fences {
		if f > 0 {
			granted++
		}
	}
	if granted < n/2+1 {
		// A part of a lock's fences could leave out the node it shares
		// with the later holder: the quorum is what makes the rule hold.
		return s, fmt.Errorf("%w: %d of %d nodes granted, a quorum of %d is needed", ErrStaleFence, granted, n, n/2+1)
	}
	next := slices.Clone(s)
	if len(next) == 0 {
		next = make(FenceSet, n)
	}
	for i, f := range fences {
		if f <= 0 {
			continue
		}
		if f < next[i] {
			return s, fmt.Errorf("%w: node %d's fence %d is below %d, accepted from a later holder", ErrStaleFence, i, f, next[i])
		}
		next[i] = f
	}
	return next, nil
}
