package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/dlock-go/dlock"
)

// Exit codes. They are part of the CLI's contract with the scripts that call
// it, so they are documented in `dlock help` and in README.md, and only
// exitCode turns an error into one.
const (
	exitOK         = 0
	exitConflict   = 1 // the lock is busy (run; -E changes it), or a force-unlock was declined
	exitUsage      = 2 // bad flags or arguments; unlock without --force
	exitRedis      = 3 // Redis unreachable or answered with an error
	exitLost       = 4 // the lock was lost while the command ran (run) or while held (lock)
	exitNotFound   = 5 // inspect/unlock: no such lock, or it changed hands
	exitViolations = 6 // torture: the history broke the lock's contract; doctor: a check failed
	exitNoExec     = 126
	exitNoCmd      = 127
	exitSignal     = 128 // plus the signal's number
)

// exitCodesHelp is the table shown by `dlock help`; README.md repeats it.
const exitCodesHelp = `Exit codes:
  0        success; for run: the command's own exit code is passed through
  1        run, lock: the lock is busy (run: change it with
           -E/--conflict-exit-code, silence the message with -q);
           unlock: you declined to force the lock
  2        usage error (bad flag or argument; unlock without --force)
  3        Redis unreachable or Redis error; serve: cannot listen
  4        run: the lock was lost while the command ran; the command was stopped;
           lock: the lock was lost while held
  5        inspect/unlock: the lock is not held, or changed hands meanwhile
  6        torture: the run found violations of the lock's contract;
           doctor: a check failed
  126/127  run: the command could not be executed / was not found
  128+N    run: the command died of signal N, or dlock got signal N
           before the command started; lock: signal N while waiting`

// usageError is a mistake in the command line: exit code 2, and a hint to
// read the command's help.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// exitError carries an exit code decided where the error arose: the child's
// own code, a signal, a code the user chose with -E. A nil err prints nothing.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// exitCode is the one place that maps an error to the process' exit code.
// conflict is the code for a busy lock (-E of run, else exitConflict).
func exitCode(err error, conflict int) int {
	var ee *exitError
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue),
		errors.Is(err, dlock.ErrInvalidName),
		errors.Is(err, dlock.ErrInvalidTTL),
		errors.Is(err, dlock.ErrInvalidOption):
		return exitUsage
	case errors.Is(err, dlock.ErrLockLost):
		return exitLost
	case errors.Is(err, dlock.ErrNotObtained) && errors.Is(err, dlock.ErrUnavailable):
		// The wait ran out while Redis could not serve it: nobody was seen
		// to hold the lock, and an alert for Redis is what the caller
		// needs, not a quiet skip.
		return exitRedis
	case errors.Is(err, dlock.ErrNotObtained),
		errors.Is(err, dlock.ErrMismatch): // the name is in use otherwise: a conflict too
		return conflict
	case errors.Is(err, dlock.ErrNotHeld):
		return exitNotFound
	}
	// Everything else comes from talking to Redis: a refused or timed-out
	// connection, an AUTH failure, a WRONGTYPE, a Cluster that is down.
	return exitRedis
}

// report prints err for a human on w and returns the exit code. cmdPath is
// the command that failed, for the usage hint.
func report(w io.Writer, err error, conflict int, cmdPath string) int {
	code := exitCode(err, conflict)
	var ee *exitError
	if err != nil && !(errors.As(err, &ee) && ee.err == nil) {
		// The library's errors already start with "dlock: "; say it once.
		fmt.Fprintf(w, "dlock: %s\n", trimDlock(err))
	}
	// Not for an exitError: the command under run may exit 2 itself.
	if code == exitUsage && !errors.As(err, &ee) && cmdPath != "" {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", cmdPath)
	}
	return code
}
