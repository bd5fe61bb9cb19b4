//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// Pause stops the server process with SIGSTOP; Resume continues it.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

var sigKill os.Signal = syscall.SIGKILL

// PauseProcess stops p (a test's worker process) with SIGSTOP, as a GC pause
// or a VM freeze would; ResumeProcess continues it with SIGCONT.
func PauseProcess(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// ResumeProcess continues a process PauseProcess stopped.
func ResumeProcess(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
