package main

import "syscall"

// childAttr: as on Linux (sysproc_linux.go). FreeBSD has the parent-death
// signal too (procctl PROC_PDEATHSIG_CTL, which Go sets from Pdeathsig).
func childAttr(parentDeath syscall.Signal, pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: parentDeath}
}

// hideEnviron: only Linux keeps a process' environment in a file its
// children can read (/proc/PID/environ); here nothing is to be done.
func hideEnviron() error { return nil }
