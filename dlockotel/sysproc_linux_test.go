package dlockotel_test

import "syscall"

// dieWithParent kills a server the test starts when the test binary dies,
// even killed by a timeout (Linux only: Pdeathsig).
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
