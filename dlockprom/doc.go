// Package dlockprom exports what happens to dlock's locks as Prometheus
// metrics.
//
// A Collector is both a dlock.Observer, handed to dlock.New with
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
package dlockprom
