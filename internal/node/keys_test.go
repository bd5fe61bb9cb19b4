package node_test

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/node"
)

// Prefixes and names the key tests build keys with: names holding '{', '}',
// ':' and the suffixes themselves, so that a name cannot be told from a
// suffix by its look alone.
var (
	keyPrefixes = []string{"dlock:", "", "p7:", "a:b:", "x*?[]:", "::", "q"}
	keyNames    = []string{
		"a", "order:42", "x:q", "x:qd", "x:fence", "x:sem", "x:sem:d", "x:sem:q", "x:sem:qd",
		"x:r:0123", ":r:", ":q", "q", "a{b", "a}b", "a}:q", "a}:fence", "a}:sem", "a}:r:tok",
		"{x}", "{", "x}", "}:q", "a}}b", "*", "n?[0-9]", "é", strings.Repeat("long:", 50), "",
	}
	keyTokens = []string{"0123456789abcdef0123456789abcdef", node.SharedPrefix + "0123456789abcdef0123456789abcdef",
		node.SemPrefix + "0123456789abcdef0123456789abcdef", "x", ":q", "{"}
)

// TestParseKeyInvertsKeysOf: every key KeysOf, Keys.Sem and the calls build
// is read back by ParseKey as the name's, and as the kind of key it is.
func TestParseKeyInvertsKeysOf(t *testing.T) {
	for _, prefix := range keyPrefixes {
		for _, name := range keyNames {
			k := node.KeysOf(prefix, name)
			s := k.Sem()
			want := map[string]node.KeyKind{
				k.Lock: node.KeyLock, k.Fence: node.KeyFence, k.Queue: node.KeyQueue, k.QData: node.KeyQData,
				s.Permits: node.KeySem, s.Data: node.KeySemData, s.Queue: node.KeySemQueue, s.QData: node.KeySemQData,
			}
			for _, tok := range keyTokens {
				want[k.Record+tok] = node.KeyRecord
			}
			if len(want) != 8+len(keyTokens) {
				t.Fatalf("KeysOf(%q, %q): two keys are the same: %v", prefix, name, want)
			}
			for key, kind := range want {
				gotName, gotKind := node.ParseKey(prefix, key)
				if gotName != name || gotKind != kind {
					t.Errorf("ParseKey(%q, %q) = %q, %v; want %q, %v", prefix, key, gotName, gotKind, name, kind)
				}
			}
		}
	}
}

// TestParseKeyKnowsEveryKey: ParseKey tells apart every key of Keys and
// SemKeys and every key a call touches, so a key added to KeysOf, Sem or a
// call fails here until ParseKey reads it.
func TestParseKeyKnowsEveryKey(t *testing.T) {
	const prefix, name = "p7:", "order:42"
	k := node.KeysOf(prefix, name)
	kinds := map[node.KeyKind]string{}
	for _, v := range []any{k, k.Sem()} {
		rv := reflect.ValueOf(v)
		for i := range rv.NumField() {
			f := rv.Type().Field(i)
			if !f.IsExported() || f.Type.Kind() != reflect.String {
				continue
			}
			key := rv.Field(i).String()
			switch f.Name {
			case "Handoff":
				continue // channels, not keys
			case "Record":
				key += "0123456789abcdef" // a key per token
			}
			what := rv.Type().Name() + "." + f.Name
			gotName, kind := node.ParseKey(prefix, key)
			if gotName != name || kind == node.KeyNone {
				t.Errorf("%s = %q: ParseKey = %q, %v; want %q and its kind", what, key, gotName, kind, name)
				continue
			}
			if other, dup := kinds[kind]; dup {
				t.Errorf("%s and %s are both read as %v", other, what, kind)
			}
			kinds[kind] = what
		}
	}
	acq := node.AcquireArgs{TTL: time.Second, Waiter: "c", Alive: time.Second, QueueExpiry: time.Second,
		FenceLifetime: time.Hour, Permits: 2}
	retake := acq
	retake.Retake = true
	rel := node.ReleaseArgs{Record: time.Second, FenceLifetime: time.Hour}
	for _, tok := range keyTokens[:3] {
		for what, c := range map[string]node.Call{
			"Acquire": node.Acquire(k, tok, acq), "Acquire (retake)": node.Acquire(k, tok, retake),
			"Release": node.Release(k, tok, rel), "Refresh": node.Refresh(k, tok, time.Second), "PTTL": node.PTTL(k, tok),
		} {
			for _, key := range c.Keys() {
				if gotName, kind := node.ParseKey(prefix, key); gotName != name || kind == node.KeyNone {
					t.Errorf("%s for token %.1s…: key %q: ParseKey = %q, %v", what, tok, key, gotName, kind)
				}
			}
		}
	}
}

// TestParseKeyOtherKeys: a key KeysOf did not make is no lock's key; and
// whatever ParseKey does read as a lock's key, KeysOf builds again.
func TestParseKeyOtherKeys(t *testing.T) {
	for _, key := range []string{
		"", "dlock:", "dlock:{", "dlock:a", "dlock:{a", "dlock:a}", "xdlock:{a}", "dlockx:{a}", "other:{a}",
		"dlock:{a}:", "dlock:{a}:x", "dlock:{a}:qq", "dlock:{a}:q:", "dlock:{a}:qd:", "dlock:{a}:fence:",
		"dlock:{a}:fences", "dlock:{a}:r:", "dlock:{a}:r", "dlock:{a}:w:client", "dlock:{a}:sem:", "dlock:{a}:sem:x",
		"dlock:{a}:racy", "dlock:{a}:racy:fence", "dlock:{a}:q}x", "dlock:{a}x", "dlock:{a}:Q", "dlock:{a} ",
		"dlock:naive:a", "dlock:res:max:a", "dlock:junk:1", "{a}", "{a}:q",
	} {
		if name, kind := node.ParseKey("dlock:", key); kind != node.KeyNone || name != "" {
			t.Errorf("ParseKey(%q, %q) = %q, %v; want no lock's key", "dlock:", key, name, kind)
		}
	}
	// Random keys over the characters keys are made of: any ParseKey
	// reads as a lock's is that lock's key.
	const alphabet = "{}:qdfencsmrwx*"
	rng := rand.New(rand.NewPCG(1, 2))
	read := 0
	for range 200000 {
		b := make([]byte, rng.IntN(16))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		prefix := keyPrefixes[rng.IntN(len(keyPrefixes))]
		key := prefix + string(b)
		if rng.IntN(2) == 0 {
			key = prefix + "{" + string(b)
		}
		name, kind := node.ParseKey(prefix, key)
		if kind == node.KeyNone {
			if name != "" {
				t.Errorf("ParseKey(%q, %q) = %q, %v: a name without a kind", prefix, key, name, kind)
			}
			continue
		}
		read++
		if !madeBy(prefix, name, kind, key) {
			t.Errorf("ParseKey(%q, %q) = %q, %v, but that is not what KeysOf(%q, %q) builds", prefix, key, name, kind, prefix, name)
		}
	}
	if read < 1000 {
		t.Fatalf("only %d random keys were a lock's: the test no longer tries much", read)
	}
}

// madeBy reports whether key is the key of kind that KeysOf(prefix, name)
// builds.
func madeBy(prefix, name string, kind node.KeyKind, key string) bool {
	k := node.KeysOf(prefix, name)
	s := k.Sem()
	switch kind {
	case node.KeyLock:
		return key == k.Lock
	case node.KeyFence:
		return key == k.Fence
	case node.KeyQueue:
		return key == k.Queue
	case node.KeyQData:
		return key == k.QData
	case node.KeyRecord:
		tok, ok := strings.CutPrefix(key, k.Record)
		return ok && tok != "" && !strings.Contains(tok, "}")
	case node.KeySem:
		return key == s.Permits
	case node.KeySemData:
		return key == s.Data
	case node.KeySemQueue:
		return key == s.Queue
	case node.KeySemQData:
		return key == s.QData
	}
	return false
}
