package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// whyForce is what unlock says when --force is missing: breaking a lock is
// rarely what fixes things, and the user should know the price first.
const whyForce = `refusing to unlock %q without --force.
A lock belongs to its holder, which may still be running: deleting the lock
lets the next process in while the holder still works, and both then change
what the lock protects at the same time. The holder only finds out at its next
renewal (within a third of its TTL); dlock run then stops its command, but
whatever it did until then overlaps with the next holder.
If the holder is gone, its lock expires by itself within its TTL. Stop a stuck
holder rather than break its lock; see who holds it with:
  dlock inspect %s
If you are sure, run:
  dlock unlock --force %s`

func newUnlockCmd(a *app) *cobra.Command {
	var force, yes bool
	cmd := &cobra.Command{
		Use:   "unlock --force [--yes] NAME",
		Short: "Break a lock held by someone else (dangerous)",
		Long: `Delete the lock NAME whoever holds it, and hand it to the next waiter.

This breaks mutual exclusion if the holder is still running, so it refuses
without --force. With --force it shows the lock and asks for confirmation on
the terminal (--yes skips the question; without a terminal --yes is
required). It deletes the lock only if its token is still the one shown, so a
lock that changed hands meanwhile is left alone (exit 5).`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !force {
				return a.refuseUnlock(cmd.Context(), args[0])
			}
			if !yes && !isTerminal(a.stdin) {
				return usagef("stdin is not a terminal, so there is nobody to confirm: add --yes")
			}
			return a.unlock(cmd.Context(), args[0], yes)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "really break the lock (see above)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// refuseUnlock is unlock without --force: the reasons to think twice for a
// lock that has a holder, and only "not held" for one that has none, which
// there is nothing to break. When Redis cannot tell, the reasons: the
// missing --force is the mistake to fix first.
func (a *app) refuseUnlock(ctx context.Context, name string) error {
	lecture := usagef(whyForce, name, shellQuote(name), shellQuote(name))
	c, _, closeAll, err := a.locker()
	if err != nil {
		return lecture
	}
	defer closeAll()
	if _, err := c.Inspect(ctx, name); errors.Is(err, dlock.ErrNotHeld) {
		return &exitError{code: exitNotFound, err: fmt.Errorf("lock %q is not held: nothing to unlock (dlock list shows the locks held)", name)}
	}
	return lecture
}

func (a *app) unlock(ctx context.Context, name string, yes bool) error {
	c, _, closeAll, err := a.locker()
	if err != nil {
		return err
	}
	defer closeAll()
	info, err := c.Inspect(ctx, name)
	if err != nil {
		return asUnlockError(name, err)
	}
	fmt.Fprintf(a.stdout, "lock %q is held:\n", name)
	if err := writeDetail(a.stdout, info, time.Now()); err != nil {
		return err
	}
	if !yes {
		ok, err := a.confirm(fmt.Sprintf("Break this lock while %q may still be working under it? [y/N] ", info.Owner))
		if err != nil {
			return err
		}
		if !ok {
			return &exitError{code: exitConflict, err: errors.New("not unlocked: declined")}
		}
	}
	// The token shown is the one deleted: compare-and-delete, so a lock
	// that was released and taken again since the question is not touched.
	got, err := c.ForceUnlock(ctx, name, info.Token)
	switch {
	case errors.Is(err, dlock.ErrNotHeld) && got.Token == "":
		return fmt.Errorf("%w: lock %q was released since it was shown; nothing deleted", dlock.ErrNotHeld, name)
	case errors.Is(err, dlock.ErrNotHeld):
		return fmt.Errorf("%w: lock %q changed hands since it was shown (now owner %q, fence %d); nothing deleted; see dlock inspect %s",
			dlock.ErrNotHeld, name, got.Owner, got.Fence, shellQuote(name))
	case err != nil:
		return err
	}
	fmt.Fprintf(a.stdout, "unlocked %q: it was held by %q (token %s…, fence %d) for %v.\n",
		name, got.Owner, got.TokenPrefix(), got.Fence, roundDur(got.Age(time.Now())))
	if got.Waiters > 0 {
		fmt.Fprintf(a.stdout, "%d waiter(s) were woken: the first in line holds the lock now.\n", got.Waiters)
	} else {
		fmt.Fprintln(a.stdout, "nobody was waiting for it.")
	}
	fmt.Fprintln(a.stdout, "The old holder learns at its next renewal; a dlock run holder then stops its command.")
	return nil
}

// asUnlockError rewords an error of the Inspect that unlock starts with:
// the library names its operation "inspect", which a user who typed unlock
// would take for a command they did not run.
func asUnlockError(name string, err error) error {
	if errors.Is(err, dlock.ErrNotHeld) {
		return &dlock.Error{Op: "unlock", Name: name,
			Err: fmt.Errorf("%w: nobody holds it, so there is nothing to unlock (dlock list shows the locks held)", dlock.ErrNotHeld)}
	}
	var de *dlock.Error
	if errors.As(err, &de) && de.Op == "inspect" {
		e := *de
		e.Op = "unlock"
		return &e
	}
	return err
}

// shellQuote quotes name for a command line the user may paste, only when
// it needs it.
func shellQuote(name string) string {
	if name != "" && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@%+=,") == "" {
		return name
	}
	return "'" + strings.ReplaceAll(name, "'", `'\''`) + "'"
}

// confirm asks question on the terminal and reads one answer line.
func (a *app) confirm(question string) (bool, error) {
	fmt.Fprint(a.stderr, question)
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && line == "" {
		return false, usagef("no answer on stdin: %v", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
