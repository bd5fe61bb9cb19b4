package redistest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// RunMain is the body of a TestMain: it starts a redis-server for the
// package's Example functions (they have no *testing.T to start one with)
// and stores its address in *exampleAddr, runs the tests, stops the server,
// and fails the run when goroutines outlive the tests (renewal loops,
// pub/sub readers, servers). A missing redis-server fails loudly with the
// install hint: a skipped test would pass without proving anything.
//
//	func TestMain(m *testing.M) { os.Exit(redistest.RunMain(m, &exampleAddr)) }
func RunMain(m *testing.M, exampleAddr *string) int {
	dir, err := os.MkdirTemp("", "redistest-example-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := Launch(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*exampleAddr = srv.Addr
	code := m.Run()
	srv.Kill()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}
