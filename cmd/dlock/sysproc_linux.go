package main

import "syscall"

// childAttr starts a child in a process group of its own, so that a signal
// to the group reaches the processes it starts too. parentDeath is sent to
// the child if dlock dies without cleaning up (SIGKILL, the OOM killer):
// the lock stops being renewed then, and the child must not keep working as
// if it held it. It reaches the child only, not the rest of its group, and
// only if the thread that forked the child is gone (see supervise); the
// watchdog (watchdog.go) stops the whole group.
func childAttr(parentDeath syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: parentDeath}
}
