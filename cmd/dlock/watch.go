package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/inspect"
	"github.com/dlock-go/dlock/internal/node"
)

const watchLong = `Follow who holds the lock NAME and who waits for it: one line each time
that changes (another holder or fence, readers or permits coming and going,
a waiter joining or leaving the line), until SIGINT or SIGTERM.

A line starts with the local time and the name, then:

  free
  exclusive "OWNER" fence F token T…
  shared N readers: "OWNER" fence F, ...
  semaphore K/N permits: "OWNER" fence F, ...

followed, when clients wait, by "; W waiting: "OWNER" (exclusive), ...", first
in line first. Owners are quoted as Go strings, so a newline or a terminal
escape in one cannot forge a line. -o json prints one object a line:
{"time", "name", "held", "lock"}, "lock" being what inspect -o json shows.

dlock polls Redis every --interval (default 1s; one pipelined read per poll),
and at once on every change of the lock's keys when the server sends keyspace
notifications (notify-keyspace-events with K and the classes of the keys:
KA, or Kghxz$). A change that comes and goes between two polls is not seen:
watch shows what the lock looks like, it is no event log. While Redis does
not answer, watch says so on stderr once and keeps polling.`

func newWatchCmd(a *app) *cobra.Command {
	var (
		interval time.Duration
		output   string
	)
	cmd := &cobra.Command{
		Use:   "watch NAME [--interval D] [-o text|json]",
		Short: "Follow who holds a lock and who waits for it",
		Long:  watchLong,
		Example: `  dlock watch nightly-report
  dlock watch -o json --interval 200ms deploy | jq -c '.lock.queue'`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if interval < 10*time.Millisecond {
				return usagef("--interval %v is below 10ms: every poll is a round trip to Redis", interval)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return a.watch(ctx, args[0], interval, output)
		},
	}
	durationFlag(cmd.Flags(), &interval, "interval", "", time.Second, "how often to ask Redis")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json (one object a line)")
	return cmd
}

// watchEvent is one line of watch -o json.
type watchEvent struct {
	Time time.Time `json:"time"`
	Name string    `json:"name"`
	Held bool      `json:"held"`
	Lock *lockView `json:"lock,omitempty"`
}

// watch polls Inspect until ctx ends, printing the lock each time its state
// (see watchState) differs from the last one printed.
func (a *app) watch(ctx context.Context, name string, interval time.Duration, output string) error {
	c, rdb, closeAll, err := a.locker()
	if err != nil {
		return err
	}
	defer closeAll()
	changed, stopNotify := keyspaceChanges(ctx, rdb, a.conn.prefix, name)
	defer stopNotify()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last, failing := "", false
	for first := true; ; first = false {
		info, err := c.Inspect(ctx, name)
		held := err == nil
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && errors.Is(err, dlock.ErrNotHeld):
			err = nil
		case errors.Is(err, dlock.ErrInvalidName):
			return err
		}
		if err != nil {
			if !failing {
				fmt.Fprintf(a.stderr, "dlock: watch %q: %s; polling on\n", name, trimDlock(err))
				failing = true
			}
		} else {
			if failing {
				fmt.Fprintf(a.stderr, "dlock: watch %q: Redis answers again\n", name)
				failing = false
			}
			if s := watchState(info, held); first || s != last {
				last = s
				if err := writeWatchLine(a.stdout, name, info, held, output, time.Now()); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-changed:
		}
	}
}

// keyspaceChanges subscribes to the keyspace notifications of name's keys,
// when the server sends them, and returns a channel that has a value after
// any of them changed: several changes before the next poll make one poll.
// It returns a nil channel (never ready) when the server sends none or will
// not say; polling at the interval then is all there is.
func keyspaceChanges(ctx context.Context, rdb redis.UniversalClient, prefix, name string) (<-chan struct{}, func()) {
	flags, err := rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil || !strings.Contains(flags["notify-keyspace-events"], "K") {
		return nil, func() {}
	}
	// Every key of the lock starts with prefix{name}. In a Cluster go-redis
	// subscribes on the node of the pattern's hash tag, the lock's node,
	// where its notifications are sent; not for a name with glob
	// characters, whose escaped tag hashes elsewhere: the interval alone
	// then. Any database: a few extra polls at most.
	ps := rdb.PSubscribe(ctx, "__keyspace@*__:"+globEscape(node.KeysOf(prefix, name).Lock)+"*")
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range ps.Channel() {
			select {
			case changed <- struct{}{}:
			default: // a poll is due already
			}
		}
	}()
	return changed, func() {
		_ = ps.Close() // closes ps.Channel(), which ends the goroutine
		<-done
	}
}

// globEscape quotes the characters PSUBSCRIBE's patterns give a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// watchState is what a change is: who holds the lock with which fence and
// token, and who waits in which order; not the ages and leases left, which
// change at every poll.
func watchState(i inspect.LockInfo, held bool) string {
	if !held {
		return "free"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%q|%d|%d|%d", i.Kind, i.Token, i.Owner, i.Fence, i.Permits, i.Waiters)
	for _, r := range i.Readers {
		fmt.Fprintf(&b, "|r %s %q %d", r.Token, r.Owner, r.Fence)
	}
	for _, p := range i.Holders {
		fmt.Fprintf(&b, "|p %s %q %d", p.Token, p.Owner, p.Fence)
	}
	for _, w := range i.Queue {
		fmt.Fprintf(&b, "|w %s %q %v", w.Token, w.Owner, w.Shared)
	}
	return b.String()
}

func writeWatchLine(w io.Writer, name string, i inspect.LockInfo, held bool, output string, now time.Time) error {
	if output == "json" {
		ev := watchEvent{Time: now, Name: name, Held: held}
		if held {
			v := viewOf(i, now)
			ev.Lock = &v
		}
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintf(w, "%s %q %s\n", now.Format("2006-01-02T15:04:05.000Z07:00"), name, watchText(i, held))
	return err
}

// watchText is the state part of a text line.
func watchText(i inspect.LockInfo, held bool) string {
	if !held {
		return "free"
	}
	var b strings.Builder
	switch i.Kind {
	case dlock.KindShared:
		fmt.Fprintf(&b, "shared %s:", readersText(len(i.Readers)))
		for n, r := range i.Readers {
			fmt.Fprintf(&b, "%s %q fence %d", sep(n), r.Owner, r.Fence)
		}
	case dlock.KindSemaphore:
		fmt.Fprintf(&b, "semaphore %d/%d permits:", len(i.Holders), i.Permits)
		for n, p := range i.Holders {
			fmt.Fprintf(&b, "%s %q fence %d", sep(n), p.Owner, p.Fence)
		}
	default:
		fmt.Fprintf(&b, "exclusive %q fence %d token %s…", i.Owner, i.Fence, i.TokenPrefix())
	}
	if len(i.Queue) > 0 {
		fmt.Fprintf(&b, "; %d waiting:", len(i.Queue))
		for n, w := range i.Queue {
			fmt.Fprintf(&b, "%s %q (%s)", sep(n), w.Owner, kindText(w.Shared))
		}
	}
	return b.String()
}

func sep(n int) string {
	if n == 0 {
		return ""
	}
	return ","
}
