package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

const lockLong = `Take the lock NAME and hold it until SIGINT or SIGTERM, like etcdctl lock
without a command: for scripts that take a lock in one step and work in
others, and for holding a lock by hand while you look at something.

Once the lock is held, dlock prints one line on stdout and flushes it:

  NAME FENCE

the fence being the last field (names may contain spaces; -o json prints
{"name", "fence", "kind", "owner", "ttl_ms"} instead). It then renews the lock
every third of --ttl until SIGINT, SIGTERM, SIGHUP or SIGQUIT, releases it and exits 0.

If the lock is lost meanwhile (Redis unreachable past the lease, the key
deleted, dlock unlock --force), dlock says so on stderr and exits 4: whatever
the script did under the lock since its last renewal may overlap with the next
holder. A busy lock exits 1 after --wait, as run does; a signal while waiting
exits 128+N. Ctrl-Z is ignored: a stopped dlock would not renew the lock.`

const lockExample = `  dlock lock backup &                 # prints "backup 1795982960927357"
  coproc dlock lock -n deploy; read -r line <&"${COPROC[0]}"; fence=${line##* }
  ...; kill $COPROC_PID; wait $COPROC_PID   # exit 0: released; 4: lost meanwhile`

// lockedLine is what lock prints with -o json once it holds the lock.
type lockedLine struct {
	Name  string `json:"name"`
	Fence int64  `json:"fence"`
	Kind  string `json:"kind"`
	Owner string `json:"owner"`
	TTLMS int64  `json:"ttl_ms"`
}

func newLockCmd(a *app) *cobra.Command {
	var (
		o      runOptions
		output string
	)
	cmd := &cobra.Command{
		Use:     "lock [flags] NAME",
		Short:   "Take a lock and hold it until SIGINT or SIGTERM",
		Long:    lockLong,
		Example: lockExample,
		Args:    oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if err := checkLockFlags(cmd, &o); err != nil {
				return err
			}
			a.fitTimeout(cmd, o.ttl)
			return a.holdLock(cmd.Context(), args[0], o, output)
		},
	}
	fs := cmd.Flags()
	durationFlag(fs, &o.ttl, "ttl", "", 30*time.Second, "lease: how long the lock outlives a dlock that died; renewed every ttl/3; at least 1s")
	durationFlag(fs, &o.wait, "wait", "w", dlock.DefaultWait, "how long to wait for a busy lock; 0 is a single attempt")
	fs.BoolVarP(&o.noWait, "no-wait", "n", false, "fail at once when the lock is busy (--wait 0)")
	fs.BoolVarP(&o.shared, "shared", "s", false, "take a read (shared) lock, like flock -s")
	fs.BoolVar(&o.skip, "without-writer-priority", false, "with --shared: join readers even while a writer waits (writers may starve)")
	fs.IntVar(&o.permits, "permits", 0, "take one of N permits of NAME (a semaphore)")
	fs.StringVar(&o.owner, "owner", "", "who holds the lock, as list and inspect show it (default HOST/PID dlock lock, PID dlock's)")
	fs.StringVarP(&output, "output", "o", "text", "output format of the line printed once the lock is held: text or json")
	return cmd
}

// checkLockFlags refuses what run and lock refuse alike: a TTL the CLI
// cannot keep, and flags that exclude each other or are out of range.
func checkLockFlags(cmd *cobra.Command, o *runOptions) error {
	if err := checkTTL(o.ttl); err != nil {
		return err
	}
	switch {
	case o.skip && !o.shared:
		return usagef("--without-writer-priority needs -s/--shared: only a reader can skip writers")
	case o.noWait && cmd.Flags().Changed("wait"):
		return usagef("-n/--no-wait and -w/--wait exclude each other")
	case cmd.Flags().Changed("permits") && o.permits == 0:
		return usagef("--permits 0: a semaphore needs at least 1 permit")
	case o.permits < 0 || o.permits > dlock.MaxPermits:
		return usagef("--permits %d is not within 1..%d", o.permits, dlock.MaxPermits)
	case o.wait < 0:
		return usagef("--wait %v is negative", o.wait)
	}
	if o.noWait {
		o.wait = 0
	}
	return nil
}

// holdLock takes the lock name, prints it, and keeps it until a signal or the
// end of ctx (then releases it: nil) or until it is lost (exit 4).
func (a *app) holdLock(ctx context.Context, name string, o runOptions, output string) error {
	owner := o.owner
	if owner == "" {
		host, _ := os.Hostname()
		owner = fmt.Sprintf("%s/%d dlock lock", host, os.Getpid())
	}
	c, _, closeAll, err := a.locker(dlock.WithDefaultOwner(owner))
	if err != nil {
		return err
	}
	defer closeAll()

	// Caught before the lock is asked for, as run does: a Ctrl-C while
	// waiting must not leave behind a lock acquired a moment later.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...) // SIGQUIT too: it releases, as the others do
	defer signal.Stop(sigs)
	defer catchSIGPIPE()()
	// A stopped dlock renews nothing, and the lock would lapse while the
	// script that asked for it believes it still holds it.
	ignoreStop()

	lock, err := a.acquire(ctx, c, []string{name}, o, sigs)
	if err != nil {
		return err
	}
	if err := a.printLocked(lock, o, owner, output); err != nil {
		_ = a.releaseHeld(lock)
		return err
	}
	fmt.Fprintf(a.stderr, "dlock: holding lock %q (fence %d); SIGINT or SIGTERM releases it\n", name, lock.Fence())

	lockCtx := lock.Context()
	select {
	case s := <-sigs:
		fmt.Fprintf(a.stderr, "dlock: got %v: releasing lock %q\n", s, name)
	case <-ctx.Done():
	case <-lockCtx.Done():
		return &exitError{code: exitLost, err: fmt.Errorf("lock %q lost while held (%s): whatever was done under it since its last renewal may overlap with the next holder",
			name, trimDlock(context.Cause(lockCtx)))}
	}
	return a.releaseHeld(lock)
}

func (a *app) printLocked(lock dlock.Lock, o runOptions, owner, output string) error {
	if output == "json" {
		kind := dlock.KindExclusive
		switch {
		case o.permits > 0:
			kind = dlock.KindSemaphore
		case o.shared:
			kind = dlock.KindShared
		}
		// One line, not writeJSON's indented form: a script reads one line.
		b, err := json.Marshal(lockedLine{Name: lock.Name(), Fence: lock.Fence(), Kind: kind, Owner: owner, TTLMS: o.ttl.Milliseconds()})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintf(a.stdout, "%s %d\n", lock.Name(), lock.Fence())
	return err
}

// releaseHeld releases the lock on a fresh context bounded by --timeout: the
// command's own context may be the one that ended.
func (a *app) releaseHeld(lock dlock.Lock) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.conn.timeout)
	defer cancel()
	err := lock.Release(ctx)
	switch {
	case err == nil:
		fmt.Fprintf(a.stderr, "dlock: released lock %q\n", lock.Name())
		return nil
	case errors.Is(err, dlock.ErrNotHeld), errors.Is(err, dlock.ErrLockLost):
		// Lost between two renewals and found out only now.
		return &exitError{code: exitLost, err: fmt.Errorf("lock %q was no longer held when released: %s", lock.Name(), trimDlock(err))}
	}
	return fmt.Errorf("lock %q not released (%w); it expires with its TTL", lock.Name(), err)
}
