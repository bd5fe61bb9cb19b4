package node

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// argsOf is a call's wire arguments as text, as go-redis writes them.
func argsOf(c Call) []string {
	out := make([]string, len(c.args))
	for i, a := range c.args {
		out[i] = fmt.Sprint(a)
	}
	return out
}

// Arguments boxed in advance (Keys.WithToken, the ms and owner boxes) never
// change what a call sends: a call for another token than the one attached
// sends its own token and record key, and every kind's calls match the ones
// built from bare keys.
func TestBoxedArgumentsSendWhatBareOnesDo(t *testing.T) {
	const hex = "0123456789abcdef0123456789abcdef"
	acq := AcquireArgs{TTL: 2 * time.Second, Owner: "host/1", OwnerArg: "host/1", Waiter: "w1", Alive: 3 * time.Second,
		QueueExpiry: time.Minute, FenceLifetime: 7 * 24 * time.Hour, Permits: 3, Sharded: true}
	bare := acq
	bare.OwnerArg = nil
	rel := ReleaseArgs{Record: 30 * time.Second, GiveUp: true, Sharded: true, FenceLifetime: time.Hour, MinHold: 1500 * time.Millisecond}
	for _, token := range []string{hex, SharedPrefix + hex, SemPrefix + hex} {
		other := token[:len(token)-1] + "0" // same kind, another token
		plain := Keys{Lock: "p:{n}", Fence: "p:{n}:fence", Queue: "p:{n}:q", QData: "p:{n}:qd", Handoff: "p:{n}:w:", Record: "p:{n}:r:"}
		for _, k := range []Keys{KeysOf("p:", "n").WithToken(token), KeysOf("p:", "n").WithToken(other), KeysOf("p:", "n")} {
			for _, c := range []struct {
				what      string
				got, want Call
			}{
				{"acquire", Acquire(k, token, acq), Acquire(plain, token, bare)},
				{"refresh", Refresh(k, token, 2500*time.Millisecond), Refresh(plain, token, 2500*time.Millisecond)},
				{"release", Release(k, token, rel), Release(plain, token, rel)},
				{"pttl", PTTL(k, token), PTTL(plain, token)},
			} {
				if got, want := argsOf(c.got), argsOf(c.want); !slices.Equal(got, want) {
					t.Errorf("%s of %q with keys for token %q:\n got %q\nwant %q", c.what, token, tokenOf(k), got, want)
				}
			}
		}
	}
}

func tokenOf(k Keys) string {
	if k.tok == nil {
		return ""
	}
	return k.tok.token
}

// The ms boxes hold a bounded set: more distinct values than boxesMax are
// each sent as themselves, the set never grows past the bound, and a value
// seen again comes from the set.
func TestMsBoxesBoundedAndExact(t *testing.T) {
	var b boxes
	for i := range int64(3 * boxesMax) {
		v := 1000 + i
		if got := b.box(v); got != any(v) {
			t.Fatalf("box(%d) = %v", v, got)
		}
		if n := len(*b.set.Load()); n > boxesMax {
			t.Fatalf("the set holds %d values, more than %d", n, boxesMax)
		}
	}
	last := int64(1000 + 3*boxesMax - 1)
	if n := testing.AllocsPerRun(100, func() { _ = b.box(last) }); n != 0 {
		t.Errorf("box(%d) of a value in the set allocates %v times", last, n)
	}
	for _, d := range []time.Duration{0, time.Millisecond, 255 * time.Millisecond, 256 * time.Millisecond, -time.Millisecond, 90 * time.Second} {
		if got, want := ms(d), any(d.Milliseconds()); got != want {
			t.Errorf("ms(%v) = %v, want %v", d, got, want)
		}
	}
}
