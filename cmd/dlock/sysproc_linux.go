package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// childAttr starts a child in process group pgid (the watchdog's), or in a
// group of its own when pgid is 0, so that a signal to the group reaches
// the processes it starts too. parentDeath is sent to
// the child if dlock dies without cleaning up (SIGKILL, the OOM killer):
// the lock stops being renewed then, and the child must not keep working as
// if it held it. It reaches the child only, not the rest of its group, and
// only if the thread that forked the child is gone (see supervise); the
// watchdog (watchdog.go) stops the whole group.
func childAttr(parentDeath syscall.Signal, pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: parentDeath}
}

// hideEnviron makes dlock's /proc/PID files (environ among them) readable
// by root only: COMMAND, which runs as the same user with dlock as its
// parent, could otherwise read the credentials childEnv kept from it in
// /proc/$PPID/environ. It also turns off core dumps of dlock, which would
// hold them too. Not dumpable, dlock can still be signalled by its user.
func hideEnviron() error { return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
