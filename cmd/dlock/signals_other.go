//go:build !unix

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Outside Unix (Windows) there is no Ctrl-Z stop, no process groups to signal and no SIGSTOP:
// the commands that need them (run, demo, torture) refuse up front with
// unixOnly, so these are never reached there.
func ignoreStop()          {}
func ignoreTerminalStops() {}

var errNoGroups = errors.New("no process groups on Windows")

func signalGroup(int, syscall.Signal) error { return errNoGroups }
func pauseProcess(*os.Process) error        { return errNoGroups }
func resumeProcess(*os.Process) error       { return errNoGroups }

// childAttr and hideEnviron: nothing to set (see sysproc_linux.go).
func childAttr(syscall.Signal, int) *syscall.SysProcAttr { return nil }
func hideEnviron() error                                 { return nil }

// unixOnly refuses a command whose guarantees need a Unix: run stops its
// command's whole process group (SIGTERM, then SIGKILL) when the lock is
// lost, and a watchdog process does it if dlock dies; demo and torture
// freeze worker processes with SIGSTOP.
func unixOnly(command string) error {
	return &usageError{err: fmt.Errorf("dlock %s needs a Unix (Linux, macOS, a BSD): it signals process groups and stops processes, which Windows has not; list, inspect, unlock, lock, watch, serve and doctor work here", command)}
}

// watchdog and startWatchdog: run refuses on Windows before it would start
// one (watchdog.go).
type watchdog struct{}

func startWatchdog(time.Duration) (*watchdog, error) { return nil, errNoGroups }
func (*watchdog) pgid() int                          { return 0 }
func (*watchdog) disarm()                            {}
