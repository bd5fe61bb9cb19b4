package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// Mistakes in the command line are told in the CLI's terms: the flag that
// was wrong and the bound it broke, not the library's operation names
// ("new: invalid option", "given twice to AcquireAll").
func TestUsageErrorsNameTheFlagAndBound(t *testing.T) {
	srv := redistest.Start(t)
	for _, tt := range []struct {
		args []string
		want []string
		not  []string
	}{
		{[]string{"run", "--ttl", "-1", "j", "true"}, []string{"--ttl -1s must be positive"}, []string{"too short"}},
		{[]string{"lock", "--ttl", "0", "j"}, []string{"--ttl 0s must be positive"}, []string{"too short"}},
		{[]string{"--prefix", "app{1}:", "list"}, []string{`--prefix "app{1}:"`, "'{' or '}'"}, []string{"new:", "invalid option"}},
		{[]string{"run", "-N", "a", "-N", "b", "-N", "a", "true"}, []string{`-N/--name "a" is given twice`}, []string{"AcquireAll"}},
	} {
		r := dlockRun(t, srv, tt.args...)
		if r.code != exitUsage {
			t.Errorf("dlock %q: exit %d, want %d; stderr %q", tt.args, r.code, exitUsage, r.stderr)
		}
		for _, w := range tt.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("dlock %q: no %q in stderr %q", tt.args, w, r.stderr)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(r.stderr, n) {
				t.Errorf("dlock %q: %q in stderr %q", tt.args, n, r.stderr)
			}
		}
	}
}

// A name past the limit is cut in the message, which says how long it was
// and what the limit is: a 600-byte name echoed whole buried the reason.
func TestLongNameIsCutInMessages(t *testing.T) {
	srv := redistest.Start(t)
	long := strings.Repeat("a", 600)
	for _, args := range [][]string{
		{"inspect", long}, {"run", long, "true"}, {"lock", long}, {"unlock", "--force", "--yes", long},
		{"watch", long}, {"run", "-N", "ok", "-N", long, "true"},
	} {
		r := dlockRun(t, srv, args...)
		if r.code != exitUsage || strings.Contains(r.stderr, strings.Repeat("a", 100)) ||
			!strings.Contains(r.stderr, "600 bytes") || !strings.Contains(r.stderr, "at most "+strconv.Itoa(512)) {
			t.Errorf("dlock %s <600 bytes>: exit %d, stderr %q; want %d, the name cut, its length and the limit",
				args[0], r.code, r.stderr, exitUsage)
		}
	}
}
