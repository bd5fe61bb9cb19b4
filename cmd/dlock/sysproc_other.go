//go:build unix && !linux && !freebsd

package main

import "syscall"

// childAttr starts a child in process group pgid (the watchdog's), or in a
// group of its own when pgid is 0, so that a signal to the group reaches
// the processes it starts too. Only Linux and FreeBSD
// can tell a child that its parent died; elsewhere (macOS, OpenBSD, NetBSD)
// parentDeath is not used and the watchdog (watchdog.go) alone stops the
// group when dlock dies.
func childAttr(parentDeath syscall.Signal, pgid int) *syscall.SysProcAttr {
	_ = parentDeath
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
}

// hideEnviron: only Linux keeps a process' environment in a file its
// children can read (/proc/PID/environ); here nothing is to be done.
func hideEnviron() error { return nil }
