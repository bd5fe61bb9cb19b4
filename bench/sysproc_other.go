//go:build !linux

package main

import "syscall"

// dieWithUs: elsewhere nothing ties the servers to bench; its deferred
// cleanup stops them.
func dieWithUs() *syscall.SysProcAttr { return nil }
