package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// SlotMigration moves one slot, with its keys, from the primary that owns it
// to another, in the steps of a resharding (what redis-cli --cluster reshard
// does): Begin marks the slot importing on the target and migrating on the
// source, MoveKeys moves its keys with MIGRATE ... KEYS, Finish assigns the
// slot to the target. Between Begin and Finish the source answers ASK for
// keys it no longer has, and TRYAGAIN for a multi-key command (a dlock
// script) with only some of its keys; Finish makes it answer MOVED.
//
// It keeps one connection per node for its whole life, so that its steps
// follow each other without a dial in between: the open migration lasts as
// long as the keys take to move. Close closes them.
type SlotMigration struct {
	Slot     int
	From, To string // addresses of the source and the target primary
	// Lose, if set, makes MoveKeys delete the keys it returns true for on
	// the source instead of moving them: a broken resharding, to show that
	// a checker notices locks lost on the way.
	Lose func(key string) bool

	cs             *ClusterSetup
	fromID, toID   string
	fromCli, toCli *redis.Client
	moved          int
}

// MigrateSlot moves slot from its owner to the primary at to, keys and all,
// and returns how many keys moved, once every live node sees to as the
// slot's owner. between, if not nil, runs after Begin and before the keys
// move: a test's moment to act on the open migration.
//
// SETSLOT NODE on the source (Finish) is the moment the source drops the
// slot: Redis 7 then sends every client subscribed to a shard channel of the
// slot there an unsolicited sunsubscribe for it.
func (cs *ClusterSetup) MigrateSlot(ctx context.Context, slot int, to string, between func()) (int, error) {
	m, err := cs.BeginSlotMigration(ctx, slot, to)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	if between != nil {
		between()
	}
	if err := m.MoveKeys(ctx); err != nil {
		return m.moved, err
	}
	if err := m.Finish(ctx); err != nil {
		return m.moved, err
	}
	return m.moved, waitFor(ctx, cs.wait, fmt.Sprintf("every live node to see slot %d on %s", slot, to),
		func(ctx context.Context) (bool, string) {
			for _, s := range cs.Nodes {
				if !alive(ctx, s.Addr) {
					continue
				}
				owner, err := slotOwnerSeenBy(ctx, s.Addr, slot)
				if err != nil || owner != to {
					return false, fmt.Sprintf("%s sees slot %d on %q (%v)", s.Addr, slot, owner, err)
				}
			}
			return true, ""
		})
}

// KeySlot returns the cluster slot of key, as the first node that answers
// computes it.
func (cs *ClusterSetup) KeySlot(ctx context.Context, key string) (int, error) {
	var errs []error
	for _, s := range cs.Nodes {
		v, err := do(ctx, s.Addr, "CLUSTER", "KEYSLOT", key)
		if n, ok := v.(int64); err == nil && ok {
			return int(n), nil
		}
		errs = append(errs, fmt.Errorf("%s: %v", s.Addr, err))
	}
	return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT %q: %w", key, errors.Join(errs...))
}

// SlotOwner returns the address of the primary that serves slot, as the
// first node that answers sees it (CLUSTER SHARDS, online nodes only).
func (cs *ClusterSetup) SlotOwner(ctx context.Context, slot int) (string, error) {
	var errs []error
	for _, s := range cs.Nodes {
		addr, err := slotOwnerSeenBy(ctx, s.Addr, slot)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.Addr, err))
	}
	return "", fmt.Errorf("redistest: owner of slot %d: %w", slot, errors.Join(errs...))
}

func slotOwnerSeenBy(ctx context.Context, addr string, slot int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTime)
	defer cancel()
	c := probeClient(addr)
	defer c.Close()
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int64(slot) < r.Start || int64(slot) > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" && n.Health == "online" {
					return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)), nil
				}
			}
		}
	}
	return "", fmt.Errorf("no online primary serves slot %d", slot)
}

// migrationClient is a connection to one node for the steps of a migration:
// no retries (a step sent twice is not the same step), bounded reads.
func migrationClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		PoolSize: 1, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, ContextTimeoutEnabled: true})
}

// BeginSlotMigration opens the migration of slot from its owner to the
// primary at to: CLUSTER SETSLOT IMPORTING on the target first, then
// MIGRATING on the source (the order redis-cli keeps, so that an ASK from
// the source always finds the target ready).
func (cs *ClusterSetup) BeginSlotMigration(ctx context.Context, slot int, to string) (*SlotMigration, error) {
	from, err := cs.SlotOwner(ctx, slot)
	if err != nil {
		return nil, err
	}
	if from == to {
		return nil, fmt.Errorf("redistest: slot %d is already on %s", slot, to)
	}
	m := &SlotMigration{Slot: slot, From: from, To: to, cs: cs, fromCli: migrationClient(from), toCli: migrationClient(to)}
	if m.fromID, err = m.fromCli.ClusterMyID(ctx).Result(); err == nil {
		m.toID, err = m.toCli.ClusterMyID(ctx).Result()
	}
	if err == nil {
		err = m.toCli.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.fromID).Err()
	}
	if err == nil {
		err = m.fromCli.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID).Err()
	}
	if err != nil {
		m.abort(ctx)
		m.Close()
		return nil, fmt.Errorf("redistest: begin migration of slot %d from %s to %s: %w", slot, from, to, err)
	}
	return m, nil
}

// abort puts the slot back to stable on both nodes, before any key moved.
func (m *SlotMigration) abort(ctx context.Context) {
	_ = m.toCli.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "STABLE").Err()
	_ = m.fromCli.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "STABLE").Err()
}

// MoveKeys moves every key of the slot from source to target, in batches of
// up to 100 keys, until the source has none left (at most 1,000 rounds).
// MIGRATE moves a batch atomically as far as clients can tell: the source
// blocks while it runs. A key that expired between the listing and MIGRATE
// is skipped (NOKEY when none of a batch is left). No REPLACE: a key already
// on the target would be a migration bug, and fails the move.
func (m *SlotMigration) MoveKeys(ctx context.Context) error {
	host, port, err := net.SplitHostPort(m.To)
	if err != nil {
		return err
	}
	for range 1000 {
		keys, err := m.fromCli.ClusterGetKeysInSlot(ctx, m.Slot, 100).Result()
		if err != nil {
			return fmt.Errorf("redistest: CLUSTER GETKEYSINSLOT %d on %s: %w", m.Slot, m.From, err)
		}
		if len(keys) == 0 {
			return nil
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			if m.Lose != nil && m.Lose(k) {
				if err := m.fromCli.Del(ctx, k).Err(); err != nil {
					return fmt.Errorf("redistest: DEL %q on %s: %w", k, m.From, err)
				}
				continue
			}
			args = append(args, k)
		}
		if len(args) == 7 {
			continue // all lost: the next listing shows what is left
		}
		if err := m.fromCli.Do(ctx, args...).Err(); err != nil && !strings.Contains(err.Error(), "NOKEY") {
			return fmt.Errorf("redistest: MIGRATE %d keys of slot %d from %s to %s: %w", len(keys), m.Slot, m.From, m.To, err)
		}
		m.moved += len(keys)
	}
	return fmt.Errorf("redistest: slot %d on %s still has keys after 1,000 rounds of MIGRATE", m.Slot, m.From)
}

// Moved is how many keys MoveKeys moved (listed and sent; a key that
// expired on the way counts too).
func (m *SlotMigration) Moved() int { return m.moved }

// Finish assigns the slot to the target: CLUSTER SETSLOT NODE on the target
// first (it then serves the slot without ASKING), on the source next (it
// answers MOVED from then on), then on every other live primary, so that
// none sends a client to the source for long; gossip would tell them too,
// later.
func (m *SlotMigration) Finish(ctx context.Context) error {
	if err := m.toCli.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID).Err(); err != nil {
		return fmt.Errorf("redistest: SETSLOT %d NODE on the target %s: %w", m.Slot, m.To, err)
	}
	if err := m.fromCli.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID).Err(); err != nil {
		return fmt.Errorf("redistest: SETSLOT %d NODE on the source %s: %w", m.Slot, m.From, err)
	}
	for _, p := range m.cs.Primaries(ctx) {
		if p == m.From || p == m.To {
			continue
		}
		c := migrationClient(p)
		_ = c.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID).Err() // gossip covers a miss
		_ = c.Close()
	}
	return nil
}

// Close closes the migration's connections.
func (m *SlotMigration) Close() {
	_ = m.fromCli.Close()
	_ = m.toCli.Close()
}
