package main

import "syscall"

// childAttr: as on Linux (sysproc_linux.go). FreeBSD has the parent-death
// signal too (procctl PROC_PDEATHSIG_CTL, which Go sets from Pdeathsig).
func childAttr(parentDeath syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: parentDeath}
}
