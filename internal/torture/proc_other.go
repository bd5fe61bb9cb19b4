//go:build !unix

package torture

import (
	"errors"
	"os"
	"time"
)

var processStart = time.Now()

// Now is this process' monotonic clock. Without a machine-wide one the
// stamps of workers and nemesis would not compare, which is one reason the
// CLI refuses to run the suite here (cmd/dlock's unixOnly).
func Now() int64 { return int64(time.Since(processStart)) }

var errNoStop = errors.New("torture: this system cannot stop a process (no SIGSTOP)")

func pause(*os.Process) error  { return errNoStop }
func resume(*os.Process) error { return errNoStop }
