//go:build !linux

package dlockotel_test

import "syscall"

// dieWithParent: elsewhere nothing ties a child to the test binary.
func dieWithParent() *syscall.SysProcAttr { return nil }
