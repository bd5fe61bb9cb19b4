package torture

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/node"
)

// FaultMigrate moves the slot of a lock name in use to another Cluster
// primary, keys and all, and back. It excuses nothing: a resharding moves
// every key of the slot atomically (MIGRATE), its TTL, fence counter and
// queue included, so a lock must stay exclusive through it. What it may cost
// is liveness: while the slot is open, a dlock script with some of its keys
// missing on the node asked is refused with TRYAGAIN, and hand-off messages
// on the slot's shard channel are lost when the subscription moves.
const FaultMigrate = "slot-migration"

// loseLocks makes the migrations drop the lock hashes instead of moving
// them (a broken resharding): TestClusterMigrationBites sets it, to show
// that the scenario catches a migration that loses locks.
var loseLocks atomic.Bool

// migrationScenarios run slot migrations beside failovers on a Cluster:
// contenders on two names, a fifth of the critical sections longer than the
// TTL (renewals cross the migration), migrations started right after a
// grant so they meet hand-offs.
func migrationScenarios(d time.Duration) []Scenario {
	// One failover for each migration: the nemesis deals the kinds in
	// rounds, and a failover takes seconds, so with two migrations a round
	// a 10 s run (TestClusterMigration) sometimes had no failover.
	sc := scenario("cluster-migration", d, FaultFailover, FaultMigrate)
	sc.Topology, sc.Long = "cluster", 0.2
	replicas := sc
	replicas.Name, replicas.Replicas = "cluster-migration-replicas", 1
	return []Scenario{sc, replicas}
}

// migrate waits for a fresh grant, then moves the slot of the granted name
// (a name in use, with waiters about to be handed the lock) to another
// primary, and after TTL/2 to TTL, back to where it was. Each move leaves the
// slot open (importing and migrating) for 0 to 50 ms before its keys move,
// so that lock commands meet ASK and TRYAGAIN and not only MOVED.
func (r *run) migrate(ctx context.Context) error {
	cs := r.env.Cluster
	if r.sc.Topology != "cluster" || cs == nil {
		return fmt.Errorf("torture: %s needs a Cluster topology", FaultMigrate)
	}
	select { // a stale grant
	case <-r.grants:
	default:
	}
	var p *proc
	select {
	case p = <-r.grants:
	case <-time.After(2 * r.sc.TTL):
	case <-ctx.Done():
		return nil
	}
	if p == nil {
		return errNoTarget
	}
	r.mu.Lock()
	name := p.holding
	r.mu.Unlock()
	if name == "" { // released already: its neighbour is as contended
		name = "n" + strconv.Itoa(r.rng.IntN(max(r.sc.Names, 1)))
	}
	key := node.KeysOf(r.env.Prefix, name).Lock
	slot, err := cs.KeySlot(ctx, key)
	if err != nil {
		return fmt.Errorf("torture: %s: %w", FaultMigrate, err)
	}
	home, err := cs.SlotOwner(ctx, slot)
	if err != nil {
		return fmt.Errorf("torture: %s: %w", FaultMigrate, err)
	}
	others := slices.DeleteFunc(cs.Primaries(ctx), func(a string) bool { return a == home })
	if len(others) == 0 {
		return fmt.Errorf("torture: %s: no primary besides %s", FaultMigrate, home)
	}
	away := others[r.rng.IntN(len(others))]

	from := Now()
	there, openThere, err := r.moveSlot(ctx, slot, away)
	if err != nil {
		return err
	}
	sleepCtx(ctx, r.sc.TTL/2+time.Duration(r.rng.Int64N(int64(r.sc.TTL/2))))
	back, openBack, err := r.moveSlot(ctx, slot, home)
	if err != nil {
		return err
	}
	r.fault(Fault{Kind: FaultMigrate, Worker: -1, Name: name, Names: []string{name}, From: from, To: Now(),
		Note: fmt.Sprintf("slot %d of %q: %s → %s (%d keys, open %v) and back (%d keys, open %v)",
			slot, name, home, away, there, openThere.Round(time.Millisecond), back, openBack.Round(time.Millisecond))})
	sleepCtx(ctx, r.sc.TTL)
	return nil
}

// moveSlot migrates slot to the primary at to and returns how many keys
// moved and how long the slot stayed open.
func (r *run) moveSlot(ctx context.Context, slot int, to string) (int, time.Duration, error) {
	start := time.Now()
	m, err := r.env.Cluster.BeginSlotMigration(ctx, slot, to)
	if err != nil {
		return 0, 0, fmt.Errorf("torture: %s: %w", FaultMigrate, err)
	}
	defer m.Close()
	if loseLocks.Load() {
		// Lock hashes only: prefix{name}, without a suffix.
		m.Lose = func(key string) bool {
			_, kind := node.ParseKey(r.env.Prefix, key)
			return kind == node.KeyLock
		}
	}
	sleepCtx(ctx, time.Duration(r.rng.Int64N(int64(50*time.Millisecond))))
	if err := m.MoveKeys(ctx); err != nil {
		return m.Moved(), 0, fmt.Errorf("torture: %s: %w", FaultMigrate, err)
	}
	if err := m.Finish(ctx); err != nil {
		return m.Moved(), 0, fmt.Errorf("torture: %s: %w", FaultMigrate, err)
	}
	return m.Moved(), time.Since(start), nil
}
