//go:build unix

package torture

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Now reads CLOCK_MONOTONIC: one clock for every process of the machine, so
// stamps of workers and of the nemesis compare. Go's own monotonic reading
// counts from each process' start.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // CLOCK_MONOTONIC exists on every Linux, BSD and macOS
	}
	return ts.Nano()
}

// pause and resume stop a worker process and let it run again: a GC pause
// or a VM freeze, as the holder lives it.
func pause(p *os.Process) error  { return p.Signal(syscall.SIGSTOP) }
func resume(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
