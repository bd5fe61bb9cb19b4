package redistest

import (
	"errors"
	"os"
)

// Pause would stop the server process; Windows has no SIGSTOP, so the
// tests that pause a server do not run there (they need a Unix).
func (s *Server) Pause() { panic("redistest: Pause needs a Unix (SIGSTOP)") }

// Resume continues a paused server; see Pause.
func (s *Server) Resume() { panic("redistest: Resume needs a Unix (SIGCONT)") }

var sigKill os.Signal = os.Kill

var errNoStop = errors.New("redistest: stopping a process needs a Unix (SIGSTOP)")

// PauseProcess would stop p; Windows has no SIGSTOP (see Pause).
func PauseProcess(*os.Process) error { return errNoStop }

// ResumeProcess continues a process PauseProcess stopped; see PauseProcess.
func ResumeProcess(*os.Process) error { return errNoStop }
