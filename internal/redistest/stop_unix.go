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
