//go:build !linux

package redistest

import "syscall"

// ChildAttr: only Linux can tie a child's life to its parent's
// (Pdeathsig); elsewhere a test binary killed without cleanup leaves its
// servers running, to be stopped by hand.
func ChildAttr() *syscall.SysProcAttr { return nil }
