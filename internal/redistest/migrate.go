package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// MigrateSlot moves slot, keys included, from the primary that serves it to
// the primary on to, the way redis-cli --cluster reshard does: IMPORTING on
// the target, MIGRATING on the source, MIGRATE of every key, then SETSLOT
// NODE on the target, the source and every other primary. It returns the
// source's address once every live node sees to as the owner of slot.
//
// SETSLOT NODE on the source is the moment the source drops the slot: Redis
// 7 then sends every client subscribed to a shard channel of the slot on
// the source an unsolicited sunsubscribe for it.
//
// A command that touches keys of the slot while it migrates gets ASK or
// TRYAGAIN, which go-redis' ClusterClient follows or retries.
func (cs *ClusterSetup) MigrateSlot(ctx context.Context, slot int, to string) (string, error) {
	if slot < 0 || slot >= clusterSlots {
		return "", fmt.Errorf("redistest: MigrateSlot: slot %d outside 0..%d", slot, clusterSlots-1)
	}
	from, fromID, err := cs.slotOwner(ctx, slot)
	if err != nil {
		return "", err
	}
	if from == to {
		return "", fmt.Errorf("redistest: MigrateSlot: slot %d is already on %s", slot, to)
	}
	toID, err := doString(ctx, to, "CLUSTER", "MYID")
	if err != nil {
		return "", fmt.Errorf("redistest: MigrateSlot: CLUSTER MYID on %s: %w", to, err)
	}
	host, port, err := net.SplitHostPort(to)
	if err != nil {
		return "", err
	}
	steps := []struct {
		addr string
		args []any
	}{
		{to, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", fromID}},
		{from, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", toID}},
	}
	for _, s := range steps {
		if _, err := do(ctx, s.addr, s.args...); err != nil {
			return "", fmt.Errorf("redistest: MigrateSlot: %v on %s: %w", s.args, s.addr, err)
		}
	}
	// Bounded: a slot of a test holds a handful of keys, and each round
	// moves up to 100 of them or fails.
	for range 1000 {
		res, err := do(ctx, from, "CLUSTER", "GETKEYSINSLOT", slot, 100)
		if err != nil {
			return "", fmt.Errorf("redistest: MigrateSlot: GETKEYSINSLOT on %s: %w", from, err)
		}
		keys, _ := res.([]any)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		args = append(args, keys...)
		if _, err := do(ctx, from, args...); err != nil {
			return "", fmt.Errorf("redistest: MigrateSlot: MIGRATE of %d keys from %s: %w", len(keys), from, err)
		}
	}
	// The target first, so it owns the slot before the source redirects
	// clients to it; then everybody else, so no node keeps a stale view
	// until gossip catches up.
	order := []string{to, from}
	for _, p := range cs.Primaries(ctx) {
		if p != to && p != from {
			order = append(order, p)
		}
	}
	for _, addr := range order {
		if _, err := do(ctx, addr, "CLUSTER", "SETSLOT", slot, "NODE", toID); err != nil {
			return "", fmt.Errorf("redistest: MigrateSlot: SETSLOT %d NODE on %s: %w", slot, addr, err)
		}
	}
	err = waitFor(ctx, cs.wait, fmt.Sprintf("every live node to see slot %d on %s", slot, to),
		func(ctx context.Context) (bool, string) {
			for _, s := range cs.Nodes {
				if !alive(ctx, s.Addr) {
					continue
				}
				owner, _, err := slotOwnerSeenBy(ctx, s.Addr, slot)
				if err != nil || owner != to {
					return false, fmt.Sprintf("%s sees slot %d on %q (%v)", s.Addr, slot, owner, err)
				}
			}
			return true, ""
		})
	if err != nil {
		return "", err
	}
	return from, nil
}

// slotOwner returns the address and id of the primary that serves slot, as
// the first node that answers sees it.
func (cs *ClusterSetup) slotOwner(ctx context.Context, slot int) (addr, id string, err error) {
	err = fmt.Errorf("redistest: no cluster node answered for slot %d", slot)
	for _, s := range cs.Nodes {
		if addr, id, err = slotOwnerSeenBy(ctx, s.Addr, slot); err == nil {
			return addr, id, nil
		}
	}
	return "", "", err
}

// slotOwnerSeenBy returns the primary that owns slot in the CLUSTER NODES of
// the node at addr. Slots in migration ("[N->-id]", "[N-<-id]") belong to
// the node that lists them as a plain slot.
func slotOwnerSeenBy(ctx context.Context, addr string, slot int) (string, string, error) {
	text, err := doString(ctx, addr, "CLUSTER", "NODES")
	if err != nil {
		return "", "", err
	}
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "master") {
			continue
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && l <= slot && slot <= h {
				a, _, _ := strings.Cut(f[1], "@")
				return a, f[0], nil
			}
		}
	}
	return "", "", fmt.Errorf("redistest: %s lists no owner of slot %d", addr, slot)
}
