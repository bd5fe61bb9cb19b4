package redistest

import "syscall"

// ChildAttr kills a server (or a redis-cli) the tests start when the test
// binary dies without cleanup (a timeout kills it), so no orphan keeps its
// port or fails over someone else's server later.
func ChildAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
