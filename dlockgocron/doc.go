// Package dlockgocron makes a go-co-op/gocron (v2) scheduler run each job
// once per tick across all the instances of a service, with a dlock lock per
// job: ShedLock's "lock at least / lock at most" for Go.
//
// It is a module of its own (github.com/dlock-go/dlock/dlockgocron), so that
// programs using dlock without gocron do not download it.
//
//	locker, err := dlock.New(rdb)
//	...
//	jobs, err := dlockgocron.New(locker, 30*time.Second, 10*time.Minute)
//	...
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(jobs))
//	_, err = s.NewJob(gocron.CronJob("*/5 * * * *", false), gocron.NewTask(report),
//		gocron.WithName("report"))
//
// # Model
//
// Every instance runs the same scheduler with the same jobs. On each tick,
// gocron asks the Locker for the job's lock (its name is the job's name:
// give each job a name with gocron.WithName, the same on every instance)
// before it runs the job. The Locker makes one attempt (TryAcquire): the
// instance that gets the lock runs the job; on the others the lock is busy,
// the error matches dlock.ErrNotObtained, and gocron skips the run (its
// AfterLockError listener hears why). When the job returns, gocron unlocks,
// which releases the lock.
//
// # Why a min hold
//
// Ticks do not fire at the same instant everywhere: clocks differ by some
// milliseconds to seconds, and schedulers start late under load. Without a
// min hold, a job that takes 50 ms is over and its lock free before an
// instance a second late fires the same tick: the job runs twice. With
// dlock.WithMinHold(min), a release before min has passed since the grant
// keeps the lock (held by nobody) until then, measured on the Redis server's
// clock, so the late instance finds it busy and skips. Choose min above the
// worst skew plus the scheduler's jitter, and below the interval between
// ticks, or the next tick finds the lock still kept and is skipped too.
//
// The max hold (dlock.WithMaxHold) bounds a run that hangs: no lease goes
// beyond it, so the next tick is not blocked for ever by a stuck instance.
// gocron does not pass the lock's context to the job, so a job that runs past
// the max hold is not told that its lock has ended: keep jobs well below it,
// or take the lock in the job with (*dlock.Client).Do instead.
//
// A holder that crashes releases nothing: the lock ends with its lease, which
// lasts at least the min hold, so the tick stays blocked all the same.
//
// # Why gocron
//
// gocron v2 has a hook for exactly this (gocron.Locker, set with
// gocron.WithDistributedLocker or per job with gocron.WithDistributedJobLocker),
// its Lock takes a context and its errors are reported and counted as
// skipped runs. robfig/cron/v3 would need a JobWrapper around a Job whose Run
// has neither a context nor an error to return, and it is no longer
// maintained.
package dlockgocron
