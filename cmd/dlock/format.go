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
)

// lockView is a lock as list and inspect show it. It has the token's prefix
// only: the whole token is the holder's secret, with which anyone could
// release the lock.
type lockView struct {
	Name        string    `json:"name"`
	Key         string    `json:"key"`
	Owner       string    `json:"owner"`
	TokenPrefix string    `json:"token_prefix"`
	Fence       int64     `json:"fence"`
	Since       time.Time `json:"since"`
	AgeMS       int64     `json:"age_ms"`
	LeaseMS     int64     `json:"lease_ms"`
	TTLMS       int64     `json:"ttl_ms"`
	Waiters     int64     `json:"waiters"`
	Kind        string    `json:"kind"` // exclusive, shared or semaphore
	// Readers, Holders and Queue: see dlock.LockInfo; tokens by prefix only.
	Readers []readerView `json:"readers,omitempty"`
	Permits int          `json:"permits,omitempty"` // a semaphore's n
	Holders []permitView `json:"holders,omitempty"` // a semaphore's permits
	Queue   []waiterView `json:"queue,omitempty"`
}

// permitView is one permit of a semaphore; a reader of a read lock reads
// the same.
type permitView = readerView

type readerView struct {
	Owner       string    `json:"owner"`
	TokenPrefix string    `json:"token_prefix"`
	Fence       int64     `json:"fence"`
	Since       time.Time `json:"since"`
	LeaseMS     int64     `json:"lease_ms"`
	TTLMS       int64     `json:"ttl_ms"`
}

type waiterView struct {
	Owner       string `json:"owner"`
	TokenPrefix string `json:"token_prefix"`
	Shared      bool   `json:"shared"`
	AliveMS     int64  `json:"alive_ms"`
}

func viewOf(i dlock.LockInfo, now time.Time) lockView {
	v := lockView{
		Name: i.Name, Key: i.Key, Owner: i.Owner, TokenPrefix: i.TokenPrefix(), Fence: i.Fence,
		Since: i.Since, AgeMS: i.Age(now).Milliseconds(), LeaseMS: i.Lease.Milliseconds(),
		TTLMS: i.TTL.Milliseconds(), Waiters: i.Waiters, Kind: i.Kind, Permits: i.Permits,
		Readers: readersView(i), Queue: queueView(i),
	}
	for _, p := range i.Holders {
		v.Holders = append(v.Holders, permitView{Owner: p.Owner, TokenPrefix: p.TokenPrefix(), Fence: p.Fence,
			Since: p.Since, LeaseMS: p.Lease.Milliseconds(), TTLMS: p.TTL.Milliseconds()})
	}
	return v
}

func readersView(i dlock.LockInfo) []readerView {
	var out []readerView
	for _, r := range i.Readers {
		out = append(out, readerView{Owner: r.Owner, TokenPrefix: r.TokenPrefix(), Fence: r.Fence, Since: r.Since,
			LeaseMS: r.Lease.Milliseconds(), TTLMS: r.TTL.Milliseconds()})
	}
	return out
}

func queueView(i dlock.LockInfo) []waiterView {
	var out []waiterView
	for _, w := range i.Queue {
		out = append(out, waiterView{Owner: w.Owner, TokenPrefix: w.TokenPrefix(), Shared: w.Shared, AliveMS: w.Alive.Milliseconds()})
	}
	return out
}

// ownerText is the OWNER column: the holder, or how many readers share it.
func ownerText(i dlock.LockInfo) string {
	if i.Kind == dlock.KindShared {
		return fmt.Sprintf("(%d readers)", len(i.Readers))
	}
	return safe(i.Owner)
}

// kindOf is the KIND column: read, write or semaphore.
func kindOf(i dlock.LockInfo) string {
	if i.Kind == dlock.KindSemaphore {
		return "semaphore"
	}
	return kindText(i.Kind == dlock.KindShared)
}

// kindText is how a waiter or a lock kind reads: read or write.
func kindText(shared bool) string {
	if shared {
		return "read"
	}
	return "write"
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
func writeTable(w io.Writer, infos []dlock.LockInfo, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tOWNER\tTOKEN\tFENCE\tAGE\tTTL\tWAITERS")
	for _, i := range infos {
		token := i.TokenPrefix() + "…"
		if i.Kind == dlock.KindSemaphore {
			token = "-" // one per permit: see inspect
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%v\t%v\t%d\n", safe(i.Name), kindOf(i), ownerText(i),
			token, i.Fence, roundDur(i.Age(now)), roundDur(i.TTL), i.Waiters)
	}
	return tw.Flush()
}

// writeDetail prints one lock, for inspect and unlock.
func writeDetail(w io.Writer, i dlock.LockInfo, now time.Time) error {
	if i.Kind == dlock.KindSemaphore {
		return writeSemDetail(w, i, now)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", safe(i.Name))
	fmt.Fprintf(tw, "kind:\t%s\n", kindText(i.Kind == dlock.KindShared))
	fmt.Fprintf(tw, "owner:\t%s\n", ownerText(i))
	fmt.Fprintf(tw, "token:\t%s… (prefix)\n", i.TokenPrefix())
	fmt.Fprintf(tw, "fence:\t%d\n", i.Fence)
	fmt.Fprintf(tw, "held for:\t%v (since %s)\n", roundDur(i.Age(now)), i.Since.Format(time.RFC3339))
	fmt.Fprintf(tw, "ttl left:\t%v of %v\n", roundDur(i.TTL), i.Lease)
	fmt.Fprintf(tw, "waiters:\t%d\n", i.Waiters)
	fmt.Fprintf(tw, "key:\t%s\n", safe(i.Key))
	for n, r := range i.Readers {
		fmt.Fprintf(tw, "reader %d:\t%s, token %s…, fence %d, held %v, ttl left %v of %v\n", n+1, safe(r.Owner), r.TokenPrefix(),
			r.Fence, roundDur(now.Sub(r.Since)), roundDur(r.TTL), r.Lease)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeQueue(w, i.Queue)
}

// writeSemDetail prints a semaphore: its permits, one a line, then its
// waiters.
func writeSemDetail(w io.Writer, i dlock.LockInfo, now time.Time) error {
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
func writeQueue(w io.Writer, q []dlock.WaiterInfo) error {
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
