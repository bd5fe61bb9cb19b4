package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

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

	Kind    string       `json:"kind"`              // lock or semaphore
	Permits int          `json:"permits,omitempty"` // a semaphore's n
	Holders []permitView `json:"holders,omitempty"` // a semaphore's permits
	Queue   []waiterView `json:"queue,omitempty"`   // the waiters in line
}

type permitView struct {
	Owner       string    `json:"owner"`
	TokenPrefix string    `json:"token_prefix"`
	Fence       int64     `json:"fence"`
	Since       time.Time `json:"since"`
	LeaseMS     int64     `json:"lease_ms"`
	TTLMS       int64     `json:"ttl_ms"`
}

type waiterView struct {
	Owner string    `json:"owner"`
	Since time.Time `json:"since"`
	Alive bool      `json:"alive"`
}

func viewOf(i dlock.LockInfo, now time.Time) lockView {
	v := lockView{
		Name: i.Name, Key: i.Key, Owner: i.Owner, TokenPrefix: i.TokenPrefix(), Fence: i.Fence,
		Since: i.Since, AgeMS: i.Age(now).Milliseconds(), LeaseMS: i.Lease.Milliseconds(),
		TTLMS: i.TTL.Milliseconds(), Waiters: i.Waiters, Kind: i.Kind, Permits: i.Permits,
	}
	for _, p := range i.Holders {
		v.Holders = append(v.Holders, permitView{Owner: p.Owner, TokenPrefix: p.TokenPrefix(), Fence: p.Fence,
			Since: p.Since, LeaseMS: p.Lease.Milliseconds(), TTLMS: p.TTL.Milliseconds()})
	}
	for _, w := range i.Queue {
		v.Queue = append(v.Queue, waiterView(w))
	}
	return v
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%v\t%v\t%d\n", i.Name, i.Kind, i.Owner, token, i.Fence,
			roundDur(i.Age(now)), roundDur(i.TTL), i.Waiters)
	}
	return tw.Flush()
}

// writeDetail prints one lock, for inspect and unlock.
func writeDetail(w io.Writer, i dlock.LockInfo, now time.Time) error {
	if i.Kind == dlock.KindSemaphore {
		return writeSemDetail(w, i, now)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", i.Name)
	fmt.Fprintf(tw, "owner:\t%s\n", i.Owner)
	fmt.Fprintf(tw, "token:\t%s… (prefix)\n", i.TokenPrefix())
	fmt.Fprintf(tw, "fence:\t%d\n", i.Fence)
	fmt.Fprintf(tw, "held for:\t%v (since %s)\n", roundDur(i.Age(now)), i.Since.Format(time.RFC3339))
	fmt.Fprintf(tw, "ttl left:\t%v of %v\n", roundDur(i.TTL), i.Lease)
	fmt.Fprintf(tw, "waiters:\t%d\n", i.Waiters)
	fmt.Fprintf(tw, "key:\t%s\n", i.Key)
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeQueue(w, i.Queue, now)
}

// writeSemDetail prints a semaphore: its permits, one a line, then its
// waiters.
func writeSemDetail(w io.Writer, i dlock.LockInfo, now time.Time) error {
	fmt.Fprintf(w, "name:    %s (semaphore, %d of %d permits held)\nkey:     %s\nwaiters: %d\n",
		i.Name, len(i.Holders), i.Permits, i.Key, i.Waiters)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PERMIT\tOWNER\tTOKEN\tFENCE\tAGE\tTTL")
	for n, p := range i.Holders {
		fmt.Fprintf(tw, "%d\t%s\t%s…\t%d\t%v\t%v of %v\n", n+1, p.Owner, p.TokenPrefix(), p.Fence,
			roundDur(now.Sub(p.Since)), roundDur(p.TTL), p.Lease)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeQueue(w, i.Queue, now)
}

// writeQueue prints the waiters in line, first first.
func writeQueue(w io.Writer, q []dlock.WaiterInfo, now time.Time) error {
	if len(q) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IN LINE\tWAITER\tWAITING\tALIVE")
	for n, x := range q {
		fmt.Fprintf(tw, "%d\t%s\t%v\t%v\n", n+1, x.Owner, roundDur(now.Sub(x.Since)), x.Alive)
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
