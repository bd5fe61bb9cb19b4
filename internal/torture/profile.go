package torture

import (
	"slices"
	"time"
)

// The scenarios on one Redis, by the fault they inject. Each runs 8 workers
// on 2 names with a 500 ms TTL; a few critical sections outlast the TTL.
func scenario(name string, d time.Duration, faults ...string) Scenario {
	return Scenario{Name: name, Lock: LockDlock, Faults: faults, Workers: 8, Names: 2,
		TTL: 500 * time.Millisecond, Duration: d, Long: 0.02}
}

// ShortProfile is what `make test` runs: every scenario that needs no
// Sentinel or Cluster, a few seconds each.
func ShortProfile() []Scenario {
	return slices.Concat(profile(5*time.Second), crashScenarios(8*time.Second), RedlockScenarios(8*time.Second))
}

// FullProfile is `make torture`'s: the same scenarios, longer, and the
// failover scenarios, which need a topology in Env (tests only).
func FullProfile() []Scenario {
	return slices.Concat(profile(50*time.Second), crashScenarios(50*time.Second), RedlockScenarios(50*time.Second), FailoverScenarios(50*time.Second))
}

// FailoverScenarios fail over a Sentinel or Cluster topology again and again
// (a failover takes 3–5 s with the calm after it: about ten in 50 s): with plain dlock, and on the cluster with WithReplicas(1).
//
// A failover can give a lock to two holders only if an acquisition the
// promoted replica never saw is still believed in when the new primary
// serves: the holder must be in a long critical section (a fifth of them
// here), and its TTL longer than the promotion. A cluster promotes in about
// 150 ms (FORCE). Sentinel takes 3–4 s from the kill, longer than the 500 ms
// TTL, so its scenario checks that nothing goes wrong around a failover
// rather than provoking the overlap: a 5 s TTL would, but leaves room for
// only one failover in 18 s (tried).
func FailoverScenarios(d time.Duration) []Scenario {
	sentinel := scenario("sentinel-failover", d, FaultFailover)
	sentinel.Topology, sentinel.Long = "sentinel", 0.2
	// Waits longer than a promotion: a waiter in line when the primary
	// dies rides out the refused dials and gets the lock from the new
	// primary (a 2 s wait ran out before the clients' first error).
	sentinel.Wait = 8 * time.Second
	cluster := scenario("cluster-failover", d, FaultFailover)
	cluster.Topology, cluster.Long = "cluster", 0.2
	replicas := cluster
	replicas.Name, replicas.Replicas = "cluster-failover-replicas", 1
	return append([]Scenario{sentinel, cluster, replicas}, migrationScenarios(d)...)
}

// crashScenarios crash the lock's Redis as a machine crash would
// (FaultCrash: its AOF cut back to its last fsync), with critical sections
// of up to 200 ms that span the crash and a TTL of 1 s that leaves WAITAOF
// room below the read timeout. With appendfsync everysec and plain dlock, a
// grant the cut lost is given again while its holder works (expected,
// excused). The row with WithDurableGrant runs on appendfsync always: the
// one setting under which Valkey's WAITAOF stands for an fsync
// (serverreq.EarlyWaitAOF; the option is refused under everysec there), so
// the row shows the option's grants, hand-offs and renewals through crashes
// at 0 violations, not what it would add on a Redis 8 with everysec. Tests
// only: the crash needs gcc, and the durable row Valkey.
func crashScenarios(d time.Duration) []Scenario {
	plain := scenario("crash-everysec", d, FaultCrash)
	plain.TTL, plain.Work, plain.Names = time.Second, 500*time.Millisecond, 1
	durable := plain
	durable.Name, durable.Faults, durable.Durable, durable.Fsync = "crash-always-durable", []string{FaultCrashDurable}, true, "always"
	return []Scenario{plain, durable}
}

func profile(d time.Duration) []Scenario {
	reset := scenario("reset", d)
	reset.Reset = 0.05
	reset.Faults = nil
	aof := scenario("restart-aof", d, FaultRestartAOF)
	aof.Persist = true
	// A round of the four kinds takes about 8 s: mixed gets time for one
	// in the short profile too.
	mixed := scenario("mixed", max(d, 12*time.Second), FaultKill, FaultPause, FaultBlackhole, FaultLatency)
	mixed.Reset = 0.02
	return []Scenario{
		scenario("kill", d, FaultKill),
		scenario("pause", d, FaultPause),
		scenario("blackhole", d, FaultBlackhole),
		scenario("latency", d, FaultLatency),
		reset,
		aof,
		scenario("restart-empty", d, FaultRestartEmpty),
		scenario("evict", d, FaultEvict),
		scenario("force-unlock", d, FaultForceUnlock),
		mixed,
		semaphoreScenario(d),
		sharedScenario(d),
		electionScenario(d),
	}
}

// OneServerScenarios are every scenario on one Redis that the run starts
// itself: the client-side faults and restarts and eviction (`dlock torture
// --local`).
func OneServerScenarios(d time.Duration) []Scenario { return profile(d) }

// ClientScenarios are the scenarios `dlock torture` runs against a user's
// Redis: faults of the clients and their network only.
func ClientScenarios(d time.Duration) []Scenario {
	var out []Scenario
	for _, s := range profile(d) {
		switch s.Name {
		case "restart-aof", "restart-empty", "evict", "force-unlock":
		default:
			out = append(out, s)
		}
	}
	return out
}

// semaphoreScenario: 8 workers on one name of 3 permits (dlock.WithPermits),
// with kills, pauses and resets after the permit scripts (re-sent
// acquires and releases); Check allows no more than 3 holders at once.
// Critical sections of up to 30 ms keep several permits held together.
func semaphoreScenario(d time.Duration) Scenario {
	sc := scenario("semaphore", max(d, 8*time.Second), FaultKill, FaultPause)
	sc.Names, sc.Permits, sc.Work, sc.Reset = 1, 3, 30*time.Millisecond, 0.02
	return sc
}

// sharedScenario: read and write locks (dlock.WithShared) on one name, half of
// the acquisitions reads, with kills, pauses and resets after the lock
// scripts. Check lets reads overlap reads, and nothing else; writes go
// through the fenced register, reads only take their place in line.
// Critical sections of up to 30 ms let readers pile up behind a writer and
// be granted together.
func sharedScenario(d time.Duration) Scenario {
	sc := scenario("shared", max(d, 8*time.Second), FaultKill, FaultPause)
	sc.Names, sc.Shared, sc.Work, sc.Reset = 1, 0.5, 30*time.Millisecond, 0.02
	return sc
}

// electionScenario: every worker campaigns in one leader election (package
// election) and resigns after its term, under kills, pauses, cut
// connections and resets. A term is a hold: two leaders before the first
// term's deadline is a violation, and each leader writes the fenced
// register with its term's fence.
func electionScenario(d time.Duration) Scenario {
	sc := scenario("election", max(d, 8*time.Second), FaultKill, FaultPause, FaultBlackhole)
	sc.Lock, sc.Names, sc.Work, sc.Reset = LockElection, 1, 20*time.Millisecond, 0.02
	return sc
}
