// Package dlockprom exports what happens to dlock's locks as Prometheus
// metrics.
//
// A Collector is both a observe.Observer, handed to dlock.New with
// dlock.WithObserver, and a prometheus.Collector, registered by the caller:
//
//	col := dlockprom.NewCollector()
//	prometheus.MustRegister(col)
//	locker, err := dlock.New(rdb, dlock.WithObserver(col))
//
// The Collector never registers itself, so it works with any registry (the
// default one, a per-test one, one per tenant) and two Collectors can live in
// one process when WithConstLabels tells them apart.
//
// # Metrics
//
// With the default options:
//
//	dlock_acquire_total{result}          counter    every Acquire and TryAcquire;
//	                                                result: acquired, busy, timeout, cancelled, error
//	dlock_acquire_wait_seconds{result}   histogram  from the call to its result
//	dlock_hold_seconds                   histogram  how long a lock was held, observed when it
//	                                                ends: on release or on loss, once per lock
//	dlock_renew_total{result}            counter    background renewals; result: ok, lost, error
//	dlock_lost_total{reason}             counter    held locks lost;
//	                                                reason: taken_over, expired, hold_limit
//	dlock_release_total{result}          counter    every Release; result: ok, not_held, error
//	dlock_held                           gauge      locks held by this process now
//	dlock_hold_ttl_ratio                 histogram  time held divided by the TTL, once per lock when
//	                                                it ends (not for Lockers that tell no TTL)
//	dlock_hold_warnings_total            counter    holds past their warning threshold
//	                                                (dlock.WithHoldWarning; default 10 TTLs)
//
// The wait histogram is split by result because the waits mean different
// things: a timeout always lasts the wait limit, and mixed with successful
// acquisitions it would hide how long the lock really took to get.
//
// dlock_held goes up on every acquisition and down once when the lock ends:
// on its loss, or on a Release that returned ok or not_held and was not
// preceded by a loss. A Release that failed with a Redis error does not end
// the lock (it may still be held, and the lease deadline will report its
// loss if it is never released), so it changes nothing but the counter.
//
// All label sets of the fixed labels are created at zero up front, so a
// query like rate(dlock_lost_total[5m]) has a series to work on before the
// first loss.
//
// # Cardinality
//
// Lock names are not a label by default: a name like "order:42" is usually
// one of millions, and a label per name would make a series per order, for
// every metric and every histogram bucket, until Prometheus runs out of
// memory. WithNameLabel adds a name label with the value of a function the
// caller gives, which must map names to a small, bounded set ("order:42" to
// "order").
//
// # The fleet
//
// A Collector counts what one process's locks did. What an operator of the
// whole fleet asks (how many locks are held now, by whom, who waits, what
// has been held for an hour) is in Redis, and a FleetCollector reads it
// there when Prometheus scrapes, for every process that uses the Redis:
//
//	fc, err := dlockprom.NewFleetCollector(client) // client: a *dlock.Client
//	if err != nil { ... }
//	reg.MustRegister(fc)
//
// Register it in one service (`dlock serve` does) rather than in every
// replica: each one walks the keyspace. Its metrics:
//
//	dlock_fleet_locks{group,kind}             gauge    names held now
//	dlock_fleet_holders{group,kind}           gauge    their holders: 1 per exclusive lock, the
//	                                                   readers of a shared one, a semaphore's permits
//	dlock_fleet_waiters{group,kind}           gauge    clients in line for them
//	dlock_fleet_oldest_hold_seconds{group,kind} gauge  age of the oldest grant (Redis' clock)
//	dlock_fleet_truncated                     gauge    1: the last listing stopped early, the
//	                                                   figures are partial
//	dlock_fleet_scan_keys                     gauge    keys the last listing asked SCAN to look at
//	dlock_fleet_scan_duration_seconds         gauge    how long the last listing took
//	dlock_fleet_scan_timestamp_seconds        gauge    when it ended
//	dlock_fleet_scans_total                   counter  listings (cached scrapes do not count)
//	dlock_fleet_scan_errors_total             counter  listings that failed: a Redis error, or no
//	                                                   reply at all within the time bound
//
// kind is exclusive, shared or semaphore. group is the part of the name
// before its first ':' by default ("order:42" is in "order"); the 50 groups
// with the most locks keep their own value and the rest are counted as
// "other", so the series stay bounded whatever names the fleet uses
// (WithGroups changes both). Series of a group appear while it holds a lock.
//
// The cost is bounded three ways. A listing walks the keyspace with SCAN
// (Client.Scan) and stops at a budget of keys looked at, dlock's or not, and
// at a time bound (WithScanBudget; default 100,000 keys and 3 s), exporting
// what it read with dlock_fleet_truncated 1. Its figures answer every scrape
// for a few seconds (WithCacheTTL; default 5 s). And scrapes that arrive
// during a listing wait for it instead of starting another. A listing costs
// one SCAN per 1,000 keys (each holds Redis for about 1 ms) and three
// commands per lock held, pipelined 200 locks at a time; waiters are
// counted, not read (Client.Scan's Brief). Against a local redis-server
// (BenchmarkFleetScrape) one listing took 1 ms of wall time with 100 locks
// held, 11 ms with 1,000 and 130 to 160 ms with 10,000, of which Redis
// itself spent 0.2 ms, 2.5 ms and 45 to 50 ms: with the default cache, about
// 1% of one Redis core for 10,000 locks.
//
// # Alerts and dashboard
//
// The repository's dlockprom/monitoring directory has example alert rules
// (alerts.yml: locks lost and the loss rate, renewal errors, wait timeouts,
// a spike of locks held, long holds, waiters piling up, partial or failing
// fleet listings) and a Grafana dashboard (dashboard.json) of both
// collectors. A test there loads the rules as Prometheus does and checks
// that every metric, label and label value the rules and the dashboard's
// queries use is one these collectors export.
package dlockprom
