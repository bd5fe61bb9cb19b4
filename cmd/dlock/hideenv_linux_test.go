package main

import (
	"testing"

	"golang.org/x/sys/unix"
)

// From the review of the secrets kept from COMMAND: COMMAND could read
// them from /proc/$PPID/environ. hideEnviron makes dlock not dumpable, so
// those files are root's. The tests run as root here, which reads them
// anyway: this checks the process state that makes them unreadable to the
// user, not the read itself.
func TestHideEnvironMakesDlockNotDumpable(t *testing.T) {
	if err := hideEnviron(); err != nil {
		t.Fatal(err)
	}
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d != 0 {
		t.Errorf("PR_GET_DUMPABLE = %d, %v after hideEnviron; want 0", d, err)
	}
}
