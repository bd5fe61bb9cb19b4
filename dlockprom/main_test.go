package dlockprom_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/redistest"
)

// exampleAddr is the address of the redis-server that the Example functions
// use; TestMain starts it on a free loopback port.
var exampleAddr string

var bg = context.Background()

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlockprom-example-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, err := redistest.Launch(bg, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleAddr = srv.Addr
	code := m.Run()
	srv.Kill()
	_ = os.RemoveAll(dir)
	if code == 0 {
		// The dlock clients' renewal loops, go-redis' connections and the
		// scrape servers must all be gone once the tests have cleaned up.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
