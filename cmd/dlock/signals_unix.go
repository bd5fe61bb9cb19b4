//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// ignoreStop ignores Ctrl-Z (SIGTSTP): a stopped dlock renews nothing, and
// its lock would lapse while whoever asked for it believes it is held.
func ignoreStop() { signal.Ignore(syscall.SIGTSTP) }

// ignoreTerminalStops ignores Ctrl-Z and the terminal's background
// read/write stops; a command in a background process group inherits the
// ignored SIGTTIN/SIGTTOU, so reading the terminal fails at once (EIO)
// instead of stopping it for good with the lock held.
func ignoreTerminalStops() { signal.Ignore(syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU) }

// signalGroup sends sig to every process of the group pgid.
func signalGroup(pgid int, sig syscall.Signal) error { return syscall.Kill(-pgid, sig) }

// pauseProcess and resumeProcess freeze a demo worker and let it run again.
func pauseProcess(p *os.Process) error  { return p.Signal(syscall.SIGSTOP) }
func resumeProcess(p *os.Process) error { return p.Signal(syscall.SIGCONT) }

// unixOnly is nil: every command works on a Unix.
func unixOnly(string) error { return nil }
