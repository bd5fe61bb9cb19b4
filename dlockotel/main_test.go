package dlockotel_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// exampleAddr is the address of the redis-server that the Example functions
// use; TestMain starts it on a free loopback port.
var exampleAddr string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlockotel-example-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, err := launchRedis(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleAddr = srv.addr
	code := m.Run()
	srv.kill()
	_ = os.RemoveAll(dir)
	if code == 0 {
		// dlock's renewal loops, go-redis' connections and the tracer
		// providers' processors must all be gone after the tests.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
