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
	Kind        string    `json:"kind"`
	// Readers and Queue: see dlock.LockInfo; tokens by prefix only.
	Readers []readerView `json:"readers,omitempty"`
	Queue   []waiterView `json:"queue,omitempty"`
}

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
	return lockView{
		Name: i.Name, Key: i.Key, Owner: i.Owner, TokenPrefix: i.TokenPrefix(), Fence: i.Fence,
		Since: i.Since, AgeMS: i.Age(now).Milliseconds(), LeaseMS: i.Lease.Milliseconds(),
		TTLMS: i.TTL.Milliseconds(), Waiters: i.Waiters, Kind: i.Kind,
		Readers: readersView(i), Queue: queueView(i),
	}
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
	return i.Owner
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%d\t%v\t%v\t%d\n", i.Name, kindText(i.Kind == dlock.KindShared), ownerText(i),
			i.TokenPrefix(), i.Fence, roundDur(i.Age(now)), roundDur(i.TTL), i.Waiters)
	}
	return tw.Flush()
}

// writeDetail prints one lock, for inspect and unlock.
func writeDetail(w io.Writer, i dlock.LockInfo, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", i.Name)
	fmt.Fprintf(tw, "kind:\t%s\n", kindText(i.Kind == dlock.KindShared))
	fmt.Fprintf(tw, "owner:\t%s\n", ownerText(i))
	fmt.Fprintf(tw, "token:\t%s… (prefix)\n", i.TokenPrefix())
	fmt.Fprintf(tw, "fence:\t%d\n", i.Fence)
	fmt.Fprintf(tw, "held for:\t%v (since %s)\n", roundDur(i.Age(now)), i.Since.Format(time.RFC3339))
	fmt.Fprintf(tw, "ttl left:\t%v of %v\n", roundDur(i.TTL), i.Lease)
	fmt.Fprintf(tw, "waiters:\t%d\n", i.Waiters)
	fmt.Fprintf(tw, "key:\t%s\n", i.Key)
	for n, r := range i.Readers {
		fmt.Fprintf(tw, "reader %d:\t%s, token %s…, fence %d, held %v, ttl left %v of %v\n", n+1, r.Owner, r.TokenPrefix(),
			r.Fence, roundDur(now.Sub(r.Since)), roundDur(r.TTL), r.Lease)
	}
	for n, w := range i.Queue {
		fmt.Fprintf(tw, "waiter %d:\t%s (%s), token %s…\n", n+1, w.Owner, kindText(w.Shared), w.TokenPrefix())
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
