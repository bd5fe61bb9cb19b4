package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// The README's first program runs as printed: Do, then TryAcquire, against
// the Redis DLOCK_URL names.
func TestFirstProgramRuns(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("DLOCK_URL", srv.Addr)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	main()
	os.Stdout = stdout
	_ = w.Close()
	out, _ := io.ReadAll(r)
	for _, want := range []string{"processing order 42, fence ", "writing the nightly report, fence "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output %q does not say %q", out, want)
		}
	}
}
