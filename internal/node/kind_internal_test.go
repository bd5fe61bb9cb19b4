package node

import (
	"testing"

	"github.com/dlock-go/dlock/internal/scripts"
)

// A token's prefix is its kind, and every kind's calls are built from the
// kind table: the scripts of a reader's and a permit's calls are not the
// exclusive lock's.
func TestKindOfTokenPicksItsScripts(t *testing.T) {
	const hex = "0123456789abcdef0123456789abcdef"
	k := KeysOf("dlock", "name")
	if s := Acquire(k, SemPrefix+hex, AcquireArgs{}).script; s != scripts.SemAcquire {
		t.Error("a permit's acquire is not the semaphore's script")
	}
	cases := []struct {
		token string
		kind  Kind
	}{
		{hex, Exclusive},
		{SharedPrefix + hex, Shared},
		{SemPrefix + hex, Permit},
	}
	seen := map[any]Kind{}
	for _, c := range cases {
		if got := KindOf(c.token); got != c.kind {
			t.Errorf("KindOf(%.8s…) = %d, want %d", c.token, got, c.kind)
		}
		if got := KindOf(c.kind.Prefix() + hex); got != c.kind {
			t.Errorf("kind %d's own prefix %q reads as kind %d", c.kind, c.kind.Prefix(), got)
		}
		for _, call := range []Call{
			Acquire(k, c.token, AcquireArgs{}),
			Refresh(k, c.token, 1),
			Release(k, c.token, ReleaseArgs{}),
			PTTL(k, c.token),
		} {
			if other, dup := seen[call.script]; dup {
				t.Errorf("kinds %d and %d share a script", other, c.kind)
			}
			seen[call.script] = c.kind
		}
	}
}
