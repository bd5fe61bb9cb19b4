//go:build unix && !linux

package main

import "syscall"

// childAttr starts a child in a process group of its own, so that a signal
// to the group reaches the processes it starts too. Only Linux can tell a
// child that its parent died; elsewhere parentDeath is not used.
func childAttr(parentDeath syscall.Signal) *syscall.SysProcAttr {
	_ = parentDeath
	return &syscall.SysProcAttr{Setpgid: true}
}
