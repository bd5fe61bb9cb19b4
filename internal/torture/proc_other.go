//go:build !unix

package torture

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
)

var processStart = time.Now()

// Now is this process' monotonic clock. Without a machine-wide one the
// stamps of workers and nemesis would not compare, which is one reason the
// suite refuses to run here (Unsupported).
func Now() int64 { return int64(time.Since(processStart)) }

var errNoStop = errors.New("torture: this system cannot stop a process (no SIGSTOP)")

func pause(*os.Process) error  { return errNoStop }
func resume(*os.Process) error { return errNoStop }

// Unsupported says why the torture suite cannot run here.
func Unsupported() error {
	return fmt.Errorf("this needs SIGSTOP/SIGCONT to pause worker processes and a machine-wide monotonic clock, which %s has not: run it on Linux, macOS or a BSD", runtime.GOOS)
}
