package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

type runOptions struct {
	ttl       time.Duration
	wait      time.Duration
	noWait    bool
	killGrace time.Duration
	owner     string
	names     []string      // --name: several locks, all or nothing
	minHold   time.Duration // --min-hold, 0: none
	shared    bool          // --shared: a read lock, as flock -s
	skip      bool          // --without-writer-priority
	permits   int           // --permits: one of n permits (a semaphore); 0 for the exclusive lock
	quiet     bool          // -q: nothing printed when the lock is busy
	passEnv   []string      // --pass-env: secrets COMMAND gets all the same (childenv.go)
}

// acquireOptions are the options of the lock run takes.
func (o runOptions) acquireOptions() []dlock.AcquireOption {
	opts := []dlock.AcquireOption{dlock.WithTTL(o.ttl), dlock.WithWait(o.wait)}
	if o.minHold > 0 {
		opts = append(opts, dlock.WithMinHold(o.minHold))
	}
	if o.shared {
		opts = append(opts, dlock.WithShared())
	}
	if o.skip {
		opts = append(opts, dlock.WithoutWriterPriority())
	}
	if o.permits > 0 {
		opts = append(opts, dlock.WithPermits(o.permits))
	}
	return opts
}

const runLong = `Run COMMAND while holding the lock NAME, like flock(1), etcdctl lock and
consul lock, across machines.

dlock takes the lock (waiting up to --wait if it is busy), starts COMMAND in
a process group of its own, renews the lock in the background while it runs
and releases it when it exits. COMMAND's exit code is dlock's exit code (a
command killed by signal N gives 128+N).

dlock's flags go before NAME. Everything after NAME is COMMAND and its
arguments, flags included, as with flock: dlock run job cp -n a b runs
"cp -n a b". A "--" right after NAME (or, with -N, before COMMAND) is
optional and dropped; a later "--" is COMMAND's.

COMMAND finds the lock in its environment: DLOCK_NAME and DLOCK_FENCE (the
fencing token: pass it to what you write, and have the writes with a smaller
one refused).

COMMAND does not get dlock's credentials: DLOCK_PASSWORD, REDISCLI_AUTH and
DLOCK_ADMIN_TOKEN are removed from its environment, and DLOCK_URL and
REDIS_URL lose their password (they still name the server). Nor does it get
the lock's token, with which anyone can release the lock. --pass-env NAME,
repeated, gives it those it needs: --pass-env DLOCK_PASSWORD for a COMMAND
that runs dlock itself, --pass-env DLOCK_TOKEN to export the token.

A busy lock exits 1 (-E sets another code) with a message naming the
holder; -q/--quiet prints nothing then (errors still print), so that cron,
which mails what a job prints, stays quiet on a skipped run. The holder's
lease is renewed while it works: the lock stays busy until the holder ends,
not when the lease shown runs out.

SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to COMMAND's process group;
the lock is released once COMMAND exits (SIGKILL after --kill-grace).

With --name (-N), repeated, dlock takes several locks, all or nothing, in
a fixed order (sorted), so runs with overlapping names never deadlock; no
NAME comes before COMMAND then. DLOCK_NAME holds the names joined with
",", DLOCK_FENCE the first name's fence and DLOCK_FENCES every name's
fence, in the same order; losing any of the locks stops COMMAND.

If the lock is lost while COMMAND runs (Redis unreachable past the lease,
the key deleted, dlock unlock --force), COMMAND's process group gets SIGTERM,
then SIGKILL after --kill-grace, and dlock exits 4.

If dlock itself dies without stopping COMMAND (kill -9, the OOM killer),
nothing renews the lock any more, so COMMAND must not work on: a watchdog
(a small sh process that leads COMMAND's process group, on every Unix)
sends the group SIGTERM, then SIGKILL after --kill-grace. On Linux
and FreeBSD the kernel also sends COMMAND itself SIGTERM (the parent-death
signal). Should the watchdog be killed too, on macOS and the other BSDs
COMMAND runs on: kill its process group yourself.

COMMAND runs in a background process group: it cannot read from the
terminal (reads fail), so run interactive programs some other way. Ctrl-Z is
ignored: a suspended dlock would stop renewing the lock while COMMAND runs on.

--ttl is at least 1s: the lock is renewed every third of it, and a renewal
over a real network needs the other two thirds to get through, or to be
retried after a lost packet. A renewal waits at most --timeout for its
answer, which must be at most a third of --ttl, so that a dead connection
is given up in time to retry on a new one: without --timeout, run and lock
take min(5s, ttl/3); a --timeout above a third of --ttl is used, with a
warning.

The default --owner, shown by list and inspect, is HOST/PID dlock run
COMMAND: dlock's host and pid, and COMMAND's name (dlock lock's is
HOST/PID dlock lock).

Redis is asked once, at the start, whether it answers: a server that is
down or a wrong port is told within --timeout, with the address tried,
rather than waited for (exit 3). An outage after that is ridden out by
the wait for a busy lock, up to --wait.

Durations (--ttl, -w, --kill-grace, --min-hold, --timeout) are written
30s, 1m30s or 500ms, or as a number of seconds, as flock -w and etcdctl
--ttl take them: -w 5, -w 0.5.

--min-hold D keeps the lock for at least D after it was taken, even when
COMMAND ends sooner (dlock.WithMinHold): a cron job run on every machine with
-n runs once per tick, also on a machine whose clock or cron is late. Choose D
above the clock skew between machines and below the interval between ticks.
If dlock dies, the lock ends after max(--ttl, D).

With --shared (-s) the lock is a read lock, like flock -s: any number of
shared runs of NAME at once, none while a run without --shared (flock -x)
holds it. A shared run waits while an exclusive run waits ahead of it, so
readers cannot starve a writer; --without-writer-priority lifts that.`

func newRunCmd(a *app) *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [flags] NAME [--] COMMAND [ARGS...]\n  dlock run [flags] -N NAME [-N NAME]... [--] COMMAND [ARGS...]",
		Short: "Run a command while holding a lock",
		Long:  runLong,
		Example: `  dlock run --ttl 1m nightly-report -- ./report.sh --full
  dlock run -n -E 0 backup -- ./backup.sh    # exit 0 when a backup already runs
  dlock run -q -n -E 0 backup ./backup.sh    # the same, silent: cron mails nothing
  dlock run -w 5 --ttl 60 job rsync -n a/ b/ # seconds, as flock -w; -n is rsync's
  dlock run -N stock:bonn -N stock:lyon -- ./move-stock.sh
  */5 * * * * dlock run --min-hold 30s -n -E 0 job -- ./job.sh   # once per tick
  dlock run -s catalog -- ./export.sh        # many exports at once, none during an import
  dlock run --permits 3 encoder -- ./encode.sh  # at most 3 at once, across machines`,
		Args: func(cmd *cobra.Command, args []string) error {
			names, _, err := splitRunArgs(cmd.ArgsLenAtDash(), args, o.names)
			if err != nil {
				return err
			}
			return checkNames(names)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := unixOnly("run"); err != nil {
				return err
			}
			names, argv, _ := splitRunArgs(cmd.ArgsLenAtDash(), args, o.names)
			if err := checkLockFlags(cmd, &o); err != nil {
				return err
			}
			a.fitTimeout(cmd, o.ttl)
			return a.run(cmd.Context(), o, names, argv)
		},
	}
	fs := cmd.Flags()
	// Parsing stops at NAME: the rest is COMMAND's (see splitRunArgs).
	fs.SetInterspersed(false)
	durationFlag(fs, &o.ttl, "ttl", "", 30*time.Second, "lease: how long the lock outlives a dlock that died; renewed every ttl/3; at least 1s")
	durationFlag(fs, &o.wait, "wait", "w", dlock.DefaultWait, "how long to wait for a busy lock; 0 is a single attempt")
	fs.BoolVarP(&o.noWait, "no-wait", "n", false, "fail at once when the lock is busy (--wait 0)")
	fs.IntVarP(&a.conflict, "conflict-exit-code", "E", exitConflict, "exit code when the lock is busy")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "print nothing when the lock is busy (errors still print): with -n -E 0, cron mails nothing on a skipped run")
	durationFlag(fs, &o.killGrace, "kill-grace", "", 5*time.Second, "time COMMAND has to exit after SIGTERM before SIGKILL")
	durationFlag(fs, &o.minHold, "min-hold", "", 0, "keep the lock at least this long after taking it, even when COMMAND ends sooner (once per cron tick)")
	fs.BoolVarP(&o.shared, "shared", "s", false, "take a read (shared) lock, like flock -s")
	fs.BoolVar(&o.skip, "without-writer-priority", false, "with --shared: join readers even while a writer waits (writers may starve)")
	fs.StringVar(&o.owner, "owner", "", "who holds the lock, as list and inspect show it (default HOST/PID dlock run COMMAND, PID dlock's)")
	// A repeated flag, not NAME,NAME: names may contain commas, and a flag
	// cannot eat COMMAND's arguments.
	fs.StringArrayVarP(&o.names, "name", "N", nil, "a lock to take; repeat for several, taken all or nothing (no NAME before COMMAND then)")
	fs.IntVar(&o.permits, "permits", 0, "take one of N permits of NAME (a semaphore, as consul lock -n): at most N commands run at once")
	fs.StringArrayVar(&o.passEnv, "pass-env", nil, "give COMMAND this variable run withholds (DLOCK_PASSWORD, REDISCLI_AUTH, DLOCK_ADMIN_TOKEN, DLOCK_URL, REDIS_URL with their password, DLOCK_TOKEN); repeatable")
	return cmd
}

// splitRunArgs takes NAME and COMMAND apart. Flags are parsed up to the
// first argument that is not one (SetInterspersed(false)), as flock(1) and
// etcdctl lock do: everything after NAME is COMMAND's, its flags and any
// "--" included, so `dlock run job cp -n a b` cannot read -n as its own.
// dash is the number of arguments before a "--" that pflag consumed, which
// can only be one that came before any argument: 0, or -1 without one. A
// "--" right after NAME is dlock's and dropped. With --name, flagged are the
// names and every argument is COMMAND's.
func splitRunArgs(dash int, args, flagged []string) ([]string, []string, error) {
	var names, argv []string
	if len(flagged) > 0 {
		switch {
		case len(args) == 0:
			return nil, nil, usagef("run needs a COMMAND: dlock run -N NAME [-N NAME]... [--] COMMAND [ARGS...]")
		case dash != 0 && len(args) > 1 && args[1] == "--":
			// NAME -- COMMAND beside -N is the old mistake of mixing both;
			// a command whose first argument is "--" is rare, and it
			// still runs with a "--" of dlock's before it.
			return nil, nil, usagef("run takes its locks from --name or from one NAME, not both: got %q before --; "+
				"to run %s with -- as its first argument, write dlock run -N NAME -- COMMAND [ARGS...]", args[0], args[0])
		}
		names, argv = flagged, args
	} else {
		if len(args) == 0 {
			return nil, nil, usagef("run needs a lock NAME and a COMMAND: dlock run [flags] NAME [--] COMMAND [ARGS...]")
		}
		if dash == 0 {
			// dlock run -- NAME COMMAND: both are there, "--" is early (the
			// habit of sudo -- COMMAND). Say where it goes, in their words.
			cmd := "COMMAND"
			if len(args) > 1 {
				quoted := make([]string, len(args)-1)
				for i, a := range args[1:] {
					quoted[i] = shellQuote(a)
				}
				cmd = strings.Join(quoted, " ")
			}
			return nil, nil, usagef("run: NAME goes before \"--\", which ends dlock's flags and starts COMMAND: dlock run [flags] NAME -- COMMAND [ARGS...], "+
				"here: dlock run %s -- %s", shellQuote(args[0]), cmd)
		}
		names, argv = args[:1], args[1:]
		if len(argv) > 0 && argv[0] == "--" {
			argv = argv[1:]
		}
		if len(argv) == 0 {
			return nil, nil, usagef("run needs a COMMAND after the lock name: dlock run [flags] %s [--] COMMAND [ARGS...]", args[0])
		}
	}
	if strings.HasPrefix(argv[0], "-") {
		// No program is called -n: this is one of dlock's flags put
		// after NAME, where it would be the command.
		return nil, nil, usagef("%q is not a command: dlock run's flags go before NAME, and everything after NAME is COMMAND "+
			"(dlock run [flags] NAME [--] COMMAND [ARGS...])", argv[0])
	}
	return names, argv, nil
}

// minTTL is the shortest lease the CLI takes (the library takes 10ms, for
// tests on loopback). dlock renews at a third of the TTL and dates a lease
// from when the renewal was sent, so a renewal has two thirds of the TTL to
// come back, or to fail and be retried, before the lock is lost. Over a real
// network one lost packet costs a TCP retransmission (200ms at least on
// Linux, more on other systems), and a busy machine adds tens of
// milliseconds of scheduling and GC. At 1s, 667ms is left: room for one
// retransmission and a retry. Below that, --ttl 10ms passed on loopback and
// then lost the lock on every run elsewhere (exit 4).
const minTTL = time.Second

// checkTTL refuses a lease the CLI cannot keep, saying why.
func checkTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return usagef("--ttl %v must be positive: it is the lease, at least %v", ttl, minTTL)
	}
	if ttl < minTTL {
		return usagef("--ttl %v is too short: at least %v, as the lock is renewed every ttl/3 and a renewal "+
			"over a real network needs the rest of the lease to get through or be retried", ttl, minTTL)
	}
	return nil
}

// fitTimeout keeps --timeout within a third of the lease, the bound the
// help gives: a renewal sent at a third of the TTL that waits longer than
// the next third for its answer leaves no time to retry on a new
// connection before the lease ends. Not given, --timeout is min(5s, ttl/3);
// given above it, it is kept, with a warning: the user may know their
// network.
func (a *app) fitTimeout(cmd *cobra.Command, ttl time.Duration) {
	third := ttl / 3
	if !cmd.Flags().Changed("timeout") {
		a.conn.timeout = min(a.conn.timeout, third)
		return
	}
	if a.conn.timeout > third {
		fmt.Fprintf(a.stderr, "dlock: warning: --timeout %v is above a third of --ttl %v (%v): a renewal stuck on a dead connection "+
			"may use up the lease before it is retried; use --timeout %v or less, or a longer --ttl\n", a.conn.timeout, ttl, third, third)
	}
}

func (a *app) run(ctx context.Context, o runOptions, names []string, argv []string) error {
	if err := checkTTL(o.ttl); err != nil {
		return err
	}
	switch {
	case o.wait < 0:
		return usagef("--wait %v is negative", o.wait)
	case o.minHold < 0:
		return usagef("--min-hold %v is negative", o.minHold)
	case o.killGrace < 0:
		return usagef("--kill-grace %v is negative", o.killGrace)
	case a.conflict < 0 || a.conflict > 255:
		return usagef("--conflict-exit-code %d is not within 0..255", a.conflict)
	case o.permits < 0 || o.permits > dlock.MaxPermits:
		return usagef("--permits %d is not within 1..%d", o.permits, dlock.MaxPermits)
	}
	if err := checkPassEnv(o.passEnv); err != nil {
		return err
	}
	owner := o.owner
	if owner == "" {
		host, _ := os.Hostname()
		// dlock's host and pid, and what that process does, as dlock
		// lock's owner reads "dlock lock": the child's pid is not known
		// before the lock is taken.
		owner = fmt.Sprintf("%s/%d dlock run %s", host, os.Getpid(), filepath.Base(argv[0]))
	}
	c, _, closeAll, err := a.locker(dlock.WithDefaultOwner(owner))
	if err != nil {
		return err
	}
	defer closeAll()

	// Signals are caught from before the lock is asked for: a Ctrl-C while
	// waiting must not leave behind a lock acquired a moment later.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	defer catchSIGPIPE()()
	// A stopped dlock renews nothing while its command runs on, so Ctrl-Z
	// is ignored. The command, in a background process group, inherits
	// the ignored terminal signals: reading the terminal fails at once
	// (EIO) instead of stopping it for good with the lock held.
	ignoreTerminalStops()

	lock, err := a.acquire(ctx, c, names, o, sigs)
	if err != nil {
		return err
	}
	return a.supervise(lock, argv, o.killGrace, sigs, o.passEnv)
}

// acquire takes the lock, or all of names, giving up when a signal arrives
// first.
func (a *app) acquire(ctx context.Context, c *dlock.Client, names []string, o runOptions, sigs <-chan os.Signal) (dlock.Lock, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		lock dlock.Lock
		err  error
	}
	done := make(chan result, 1)
	go func() {
		opts := o.acquireOptions()
		if len(names) == 1 {
			l, err := c.Acquire(actx, names[0], opts...)
			done <- result{l, err}
			return
		}
		m, err := dlock.AcquireAll(actx, c, names, opts...)
		if err != nil {
			done <- result{nil, err} // not a nil *MultiLock in a Lock
			return
		}
		done <- result{m, nil}
	}()
	select {
	case r := <-done:
		var derr *dlock.Error
		if errors.Is(r.err, dlock.ErrNotObtained) && errors.As(r.err, &derr) {
			if o.quiet {
				return nil, &exitError{code: a.conflict} // -q: the exit code says it all
			}
			return nil, busy(ctx, c, derr.Name, o.wait, r.err) // the busy one of names
		}
		return r.lock, r.err
	case s := <-sigs:
		cancel()
		if r := <-done; r.lock != nil { // acquired as the signal came
			_ = r.lock.Release(ctx)
		}
		return nil, &exitError{code: exitSignal + signum(s), err: fmt.Errorf("got %v while waiting for lock %q", s, strings.Join(names, ","))}
	}
}

// busy says who holds the busy lock, for the human reading it; the error
// still matches ErrNotObtained.
func busy(ctx context.Context, c *dlock.Client, name string, waited time.Duration, err error) error {
	e := &busyError{name: name, waited: waited, err: err}
	var noe *dlock.NotObtainedError
	if errors.As(err, &noe) {
		e.lease, e.waiters = noe.HolderTTL, noe.Waiters
	}
	if info, ierr := c.Inspect(ctx, name); ierr == nil {
		e.fence, e.age = info.Fence, roundDur(info.Age(time.Now()))
		switch info.Kind {
		case dlock.KindSemaphore:
			e.holder, e.several = fmt.Sprintf("all %d permits are taken, the first", info.Permits), "until a permit comes back"
		case dlock.KindShared:
			e.holder, e.several = "held by "+readersText(len(info.Readers))+", the first", "until they end"
		default:
			if info.Token == minHoldToken {
				// The holder released it before its min hold: nothing
				// renews it, and it frees when the lease left ends.
				e.holder, e.kept = strconv.Quote(info.Owner), roundDur(info.TTL)
				break
			}
			e.holder = "held by " + strconv.Quote(info.Owner)
		}
	}
	return e
}

// minHoldToken is the token of a name a holder released before its min hold
// (dlock.WithMinHold): kept, held by nobody, until the min hold ends.
const minHoldToken = "min-hold"

// busyError is a busy lock as run reports it: on one line, the holder
// first, and its lease as what it is. "Lease left 29.3s" read like the time
// the lock would be free, but a holder that works renews it: the lock stays
// busy as long as the holder runs.
type busyError struct {
	name    string
	holder  string        // who holds it: "held by OWNER", readers or permits; "" when gone by the time we looked
	several string        // readers or permits hold it, each with a lease of its own: when it frees
	kept    time.Duration // kept for a min hold: the time left, which nothing renews
	fence   int64
	age     time.Duration
	lease   time.Duration // the holder's lease left, 0 when unknown
	waited  time.Duration // -w, 0 for a single attempt
	waiters int64         // in line in Redis at the last attempt (this one included when it waited)
	err     error         // matches dlock.ErrNotObtained
}

func (e *busyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lock %q is busy", e.name)
	if e.waited > 0 {
		fmt.Fprintf(&b, " (waited %v)", e.waited)
	}
	if e.kept > 0 {
		fmt.Fprintf(&b, ": %s took it %v ago (fence %d) and has finished; the name is kept for its min hold and frees in %v (nothing renews it)",
			e.holder, e.age, e.fence, e.kept)
		return b.String()
	}
	if e.holder != "" {
		fmt.Fprintf(&b, ": %s for %v, fence %d", e.holder, e.age, e.fence)
	} else {
		b.WriteString(": held by another owner")
	}
	switch {
	case e.several != "":
		b.WriteString("; their leases are renewed while they work, so it stays busy " + e.several)
	case e.lease > 0:
		fmt.Fprintf(&b, "; its lease (%v left) is renewed while the holder works, so it stays busy until the holder ends", roundDur(e.lease))
	}
	if e.waiters > 0 {
		fmt.Fprintf(&b, "; %d in line", e.waiters)
	}
	return b.String()
}

func (e *busyError) Unwrap() error { return e.err }

func signum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
