package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockadmin"
	"github.com/dlock-go/dlock/inspect"
)

// lockView is a lock as list and inspect show it in JSON: the admin API's
// shape, defined once in dlockadmin, so a script can read either. It has
// the token's prefix only: the whole token is the holder's secret, with
// which anyone could release the lock.
// Its readers, permits and waiters are dlockadmin.Holder and
// dlockadmin.Waiter.
type lockView = dlockadmin.Lock

func viewOf(i inspect.LockInfo, now time.Time) lockView { return dlockadmin.LockOf(i, now) }

// ownerText is the OWNER column: the holder, or how many readers share it.
func ownerText(i inspect.LockInfo) string {
	if i.Kind == dlock.KindShared {
		return readersText(len(i.Readers))
	}
	return safe(i.Owner)
}

func readersText(n int) string {
	if n == 1 {
		return "1 reader"
	}
	return fmt.Sprintf("%d readers", n)
}

// kindOf is the KIND column: LockInfo.Kind, the words of the JSON, the
// admin page and the metrics (exclusive, shared, semaphore).
func kindOf(i inspect.LockInfo) string { return i.Kind }

// kindText is how a waiter's kind reads, in the same words.
func kindText(shared bool) string {
	if shared {
		return dlock.KindShared
	}
	return dlock.KindExclusive
}

// checkOutput validates -o before anything is sent to Redis.
func checkOutput(o string) error {
	if o != "text" && o != "json" {
		return usagef("-o/--output %q: want text or json", o)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeTable prints locks one a line, for list.
func writeTable(w io.Writer, infos []inspect.LockInfo, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tOWNER\tTOKEN\tFENCE\tAGE\tTTL\tWAITERS")
	for _, i := range infos {
		token := i.TokenPrefix() + "…"
		if i.Kind != dlock.KindExclusive {
			token = "-" // one per reader or permit: see inspect
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%v\t%v\t%d\n", safe(i.Name), kindOf(i), ownerText(i),
			token, i.Fence, roundDur(i.Age(now)), roundDur(i.TTL), i.Waiters)
	}
	return tw.Flush()
}

// writeDetail prints one lock, for inspect and unlock.
func writeDetail(w io.Writer, i inspect.LockInfo, now time.Time) error {
	switch i.Kind {
	case dlock.KindSemaphore:
		return writeSemDetail(w, i, now)
	case dlock.KindShared:
		return writeSharedDetail(w, i, now)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", safe(i.Name))
	fmt.Fprintf(tw, "kind:\t%s\n", i.Kind)
	fmt.Fprintf(tw, "owner:\t%s\n", safe(i.Owner))
	fmt.Fprintf(tw, "token:\t%s… (prefix)\n", i.TokenPrefix())
	fmt.Fprintf(tw, "fence:\t%d\n", i.Fence)
	fmt.Fprintf(tw, "held for:\t%v (since %s)\n", roundDur(i.Age(now)), i.Since.Format(time.RFC3339))
	fmt.Fprintf(tw, "ttl left:\t%v of %v\n", roundDur(i.TTL), i.Lease)
	fmt.Fprintf(tw, "waiters:\t%d\n", i.Waiters)
	fmt.Fprintf(tw, "key:\t%s\n", safe(i.Key))
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeQueue(w, i.Queue)
}

// writeSharedDetail prints a read lock: no one holder, token or lease of
// its own, but its readers, one a line, then its waiters.
func writeSharedDetail(w io.Writer, i inspect.LockInfo, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", safe(i.Name))
	fmt.Fprintf(tw, "kind:\t%s\n", i.Kind)
	fmt.Fprintf(tw, "readers:\t%d\n", len(i.Readers))
	fmt.Fprintf(tw, "fence:\t%d (the latest reader's)\n", i.Fence)
	fmt.Fprintf(tw, "held for:\t%v (since %s, the first reader)\n", roundDur(i.Age(now)), i.Since.Format(time.RFC3339))
	fmt.Fprintf(tw, "ttl left:\t%v (the last lease to end)\n", roundDur(i.TTL))
	fmt.Fprintf(tw, "waiters:\t%d\n", i.Waiters)
	fmt.Fprintf(tw, "key:\t%s\n", safe(i.Key))
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "READER\tOWNER\tTOKEN\tFENCE\tAGE\tTTL")
	for n, r := range i.Readers {
		fmt.Fprintf(tw, "%d\t%s\t%s…\t%d\t%v\t%v of %v\n", n+1, safe(r.Owner), r.TokenPrefix(), r.Fence,
			roundDur(now.Sub(r.Since)), roundDur(r.TTL), r.Lease)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeQueue(w, i.Queue)
}

// writeSemDetail prints a semaphore: its permits, one a line, then its
// waiters.
func writeSemDetail(w io.Writer, i inspect.LockInfo, now time.Time) error {
	fmt.Fprintf(w, "name:    %s (semaphore, %d of %d permits held)\nkey:     %s\nwaiters: %d\n",
		safe(i.Name), len(i.Holders), i.Permits, safe(i.Key), i.Waiters)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PERMIT\tOWNER\tTOKEN\tFENCE\tAGE\tTTL")
	for n, p := range i.Holders {
		fmt.Fprintf(tw, "%d\t%s\t%s…\t%d\t%v\t%v of %v\n", n+1, safe(p.Owner), p.TokenPrefix(), p.Fence,
			roundDur(now.Sub(p.Since)), roundDur(p.TTL), p.Lease)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeQueue(w, i.Queue)
}

// writeQueue prints the live waiters in line, first first, with their
// owners.
func writeQueue(w io.Writer, q []inspect.WaiterInfo) error {
	if len(q) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IN LINE\tWAITER\tKIND\tTOKEN\tALIVE")
	for n, x := range q {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s…\t%v\n", n+1, safe(x.Owner), kindText(x.Shared), x.TokenPrefix(), x.Alive)
	}
	return tw.Flush()
}

// roundDur keeps durations readable: milliseconds below a second, tenths
// of a second below a minute, seconds above.
func roundDur(d time.Duration) time.Duration {
	switch {
	case d < time.Second && d > -time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute && d > -time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// safe is s as a terminal should show it: as it is when every character
// prints (and no tab shifts the table), else quoted with Go's escapes. A
// name or owner is anyone's bytes: a newline would forge a table row, and
// an escape sequence would reach the operator's terminal. A leading quote
// is quoted too, so that a quoted text always was quoted by dlock.
func safe(s string) string {
	if strings.HasPrefix(s, `"`) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if r == '\t' || r == utf8.RuneError || !unicode.IsPrint(r) && r != ' ' {
			return strconv.Quote(s)
		}
	}
	return s
}
