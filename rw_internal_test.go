package dlock

import "testing"

// TestHandedTo: a release that lets several readers of one client in sends
// one message with an entry per token; a waiter finds its own entry in it,
// and the old one-entry format still parses.
func TestHandedTo(t *testing.T) {
	for _, tc := range []struct {
		msg, token string
		fence      int64
		ok         bool
	}{
		{"abc:12", "abc", 12, true},
		{"abc:12", "abd", 0, false},
		{"Ra:12;Rb:13", "Rb", 13, true},
		{"Ra:12;Rb:13", "Ra", 12, true},
		{"Ra:12;Rb:13", "Rc", 0, false},
		{"Ra:x;Rb:13", "Ra", 0, false},
		{"", "Ra", 0, false},
		{";;", "", 0, false},
	} {
		fence, ok := handedTo(tc.msg, tc.token)
		if fence != tc.fence || ok != tc.ok {
			t.Errorf("handedTo(%q, %q) = %d, %v; want %d, %v", tc.msg, tc.token, fence, ok, tc.fence, tc.ok)
		}
	}
}
