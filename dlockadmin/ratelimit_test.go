package dlockadmin

import (
	"fmt"
	"testing"
	"time"
)

// A guesser spread over many addresses fills the table to its bound and no
// further; beyond it the addresses share one limit, so they are still
// limited; addresses whose bucket refilled are forgotten to make room.
func TestFailLimiterBoundedMemory(t *testing.T) {
	l := newFailLimiter()
	now := time.Unix(1_000_000, 0)
	for i := range 20 * maxTracked {
		key := clientKey(fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255))
		if wait, _ := l.check(key, now); wait == 0 {
			l.failed(key, now)
		}
	}
	if n := len(l.addrs); n > maxTracked {
		t.Fatalf("%d addresses remembered, bound %d", n, maxTracked)
	}
	if wait, _ := l.check("203.0.113.1", now); wait == 0 {
		t.Error("a new address is let through while the overflow limit is spent")
	}
	// Once every bucket has refilled, the table makes room again.
	later := now.Add(failBurst*failEvery + failEvery)
	l.failed("203.0.113.1", later)
	if _, ok := l.addrs["203.0.113.1"]; !ok || len(l.addrs) != 1 {
		t.Errorf("after refill: %d addresses remembered, the new one %v; want it alone", len(l.addrs), ok)
	}
}

func TestClientKey(t *testing.T) {
	for _, tc := range []struct{ remote, want string }{
		{"192.0.2.7:4000", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:4000", "192.0.2.7"},
		{"[2001:db8:1:2:3:4:5:6]:4000", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:80", "2001:db8:1:2::/64"},
		{"pipe", "pipe"},
	} {
		if got := clientKey(tc.remote); got != tc.want {
			t.Errorf("clientKey(%q) = %q, want %q", tc.remote, got, tc.want)
		}
	}
}

func TestClip(t *testing.T) {
	if got := clip("short", 10); got != "short" {
		t.Errorf("clip of a short value: %q", got)
	}
	// Cut on a character boundary: é is two bytes.
	if got := clip("aé"+"bbbbbbbb", 2); got != "a…[truncated: 11 bytes]" {
		t.Errorf("clip = %q", got)
	}
}
