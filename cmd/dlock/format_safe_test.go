package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Names and owners are anyone's bytes: list and inspect must not let a
// newline forge a row or an escape sequence reach the terminal.
func TestListInspectQuoteControlCharacters(t *testing.T) {
	srv := redistest.Start(t)
	const evilName, evilOwner = "evil\n\x1b[31mname", "own\x1b[31mer\nFAKE ROW"
	ctx := context.Background()
	c := dlock.MustNew(srv.Client(t), dlock.WithDefaultOwner(evilOwner))
	defer c.Close(ctx)
	for _, name := range []string{evilName, "plain-name"} {
		l, err := c.Acquire(ctx, name, dlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	// A waiter with the same owner, for inspect's queue.
	w := dlock.MustNew(srv.Client(t), dlock.WithDefaultOwner(evilOwner))
	defer w.Close(ctx)
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		if l, err := w.Acquire(wctx, evilName, dlock.WithWait(time.Minute)); err == nil {
			_ = l.Release(ctx)
		}
	}()
	defer func() { cancel(); <-waited }()
	waitFor(t, "the waiter in line", func() bool {
		i, err := c.Inspect(ctx, evilName)
		return err == nil && i.Waiters == 1 && len(i.Queue) == 1
	})

	for _, args := range [][]string{{"list"}, {"inspect", evilName}} {
		r := dlockRun(t, srv, args...)
		if r.code != 0 {
			t.Fatalf("dlock %q: exit %d: %s", args, r.code, r.stderr)
		}
		if strings.ContainsRune(r.stdout, '\x1b') || strings.Contains(r.stdout, "\nFAKE ROW") || strings.Contains(r.stdout, "evil\n") {
			t.Errorf("dlock %q prints control characters raw:\n%s", args, r.stdout)
		}
		for _, want := range []string{strconv.Quote(evilName), strconv.Quote(evilOwner)} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("dlock %q lacks %s:\n%s", args, want, r.stdout)
			}
		}
	}
	// Ordinary names print as they did.
	r := dlockRun(t, srv, "list")
	if !strings.Contains(r.stdout, "\nplain-name ") {
		t.Errorf("list quotes an ordinary name:\n%s", r.stdout)
	}
}

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"jobs:nightly": "jobs:nightly", "host/42 (cron)": "host/42 (cron)", "café ünïcode": "café ünïcode",
		"a\nb": `"a\nb"`, "\x1b[31m": `"\x1b[31m"`, "tab\there": `"tab\there"`, `"quoted"`: `"\"quoted\""`,
		"bad\xffutf8": `"bad\xffutf8"`, "\u202eright-to-left": `"\u202eright-to-left"`,
	} {
		if got := safe(in); got != want {
			t.Errorf("safe(%q) = %s, want %s", in, got, want)
		}
	}
}
