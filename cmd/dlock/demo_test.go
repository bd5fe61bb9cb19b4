package main

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// The demo runs for real and its table shows dlock with no overselling and
// no duplicate orders. What the naive lock shows depends on timing, so it
// is only logged.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes several seconds")
	}
	r := dlockRun(t, nil, "demo")
	if r.code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, label := range []string{"oversold", "duplicate orders"} {
		naive, dl, ok := tableRow(r.stdout, label)
		if !ok {
			t.Fatalf("no %q row in the demo's table:\n%s", label, r.stdout)
		}
		if dl != "0" {
			t.Errorf("dlock %s: %s, want 0", label, dl)
		}
		t.Logf("naive lock %s: %s", label, naive)
	}
}

// tableRow finds the row of the demo's table that starts with label and
// returns its naive and dlock cells: the dlock cell is the last field, the
// naive cell what lies between them.
func tableRow(out, label string) (naive, dl string, ok bool) {
	for _, line := range strings.Split(out, "\n") {
		rest, found := strings.CutPrefix(line, label+" ")
		if !found {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return "", "", false
		}
		return strings.Join(f[:len(f)-1], " "), f[len(f)-1], true
	}
	return "", "", false
}

// Pointed at a Redis of the user's, the demo runs its workers there (they
// get the connection flags again) and deletes its keys at the end.
func TestDemoOnGivenRedisCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes several seconds")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	if err := rdb.Set(context.Background(), "users-own-key", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, srv, "demo", "--workers", "2", "--users", "20", "--stock", "10")
	if r.code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if _, dl, ok := tableRow(r.stdout, "oversold"); !ok || dl != "0" {
		t.Errorf("dlock oversold %q (row found: %v)", dl, ok)
	}
	keys, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "users-own-key" {
		t.Fatalf("keys after the demo: %v, want only the user's own", keys)
	}
}
