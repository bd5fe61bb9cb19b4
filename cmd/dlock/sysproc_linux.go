package main

import "syscall"

// childAttr starts a child in a process group of its own, so that a signal
// to the group reaches the processes it starts too. parentDeath is sent to
// the child if dlock dies without cleaning up (SIGKILL, the OOM killer):
// the lock stops being renewed then, and the child must not keep working as
// if it held it.
func childAttr(parentDeath syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: parentDeath}
}
