package main

import "syscall"

// dieWithUs kills a server bench starts if bench dies without running its
// deferred cleanup (SIGKILL, runtime crash), so no redis-server outlives it
// (Linux only: Pdeathsig).
func dieWithUs() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
