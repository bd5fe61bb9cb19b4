package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

// forwarded are the signals run passes on to the command's process group.
// Each of them also starts the kill grace: dlock is being told to stop, and
// the lock must not stay held by a command that ignores it.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// catchSIGPIPE keeps a write to a closed stdout or stderr (`dlock lock N |
// head -1` once head has gone) from killing dlock with the lock held until
// its TTL: with SIGPIPE caught, the write fails with EPIPE and dlock goes on
// to release. Notify, not Ignore: an ignored signal would be ignored by
// run's COMMAND too, while a caught one is reset for it at exec. It returns
// the function that stops catching.
func catchSIGPIPE() func() {
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	return func() { signal.Stop(pipe) }
}

// supervise runs the command while lock is held and returns what run exits
// with: nil or the command's code, or a lost-lock error.
func (a *app) supervise(lock dlock.Lock, argv []string, grace time.Duration, sigs <-chan os.Signal, pass []string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	if a.stdin != nil { // a nil *os.File in an interface is not "no input"
		cmd.Stdin = a.stdin
	}
	cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
	// Without dlock's credentials: see childenv.go. Nor through
	// /proc/$PPID/environ: hideEnviron. Failing that, COMMAND runs all
	// the same, as before the environment was cleaned.
	cmd.Env = childEnv(a.environ(), lock, pass)
	_ = hideEnviron()
	// Should dlock die without stopping COMMAND, the watchdog stops its
	// group (see watchdog.go), which the watchdog leads and COMMAND joins.
	// Without one, COMMAND leads a group of its own and only the
	// parent-death signal is left (Linux, FreeBSD): say so, and run COMMAND
	// all the same.
	wd, err := startWatchdog(grace)
	if err != nil {
		fmt.Fprintf(a.stderr, "dlock: warning: no watchdog (%v): if dlock is killed, COMMAND's process group is not stopped\n", err)
	}
	disarm := func() {
		if wd != nil {
			wd.disarm()
			wd = nil
		}
	}
	defer disarm()
	pgid := 0
	if wd != nil {
		pgid = wd.pgid()
	}
	cmd.SysProcAttr = childAttr(syscall.SIGTERM, pgid)
	// The parent-death signal is sent when the thread that forked the
	// child exits, not the process (prctl(2); go.dev/issue/27505). Go ends
	// a thread when a goroutine locked to it returns without unlocking, so
	// the thread that forks stays this goroutine's, and no other's, until
	// the child has exited, as moby and go-runc do.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		disarm()
		_ = lock.Release(context.Background())
		return startError(argv[0], err)
	}
	// A signal to -pgid reaches whatever COMMAND started too (a shell
	// script's children), not only the script.
	if pgid == 0 {
		pgid = cmd.Process.Pid
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	lockCtx := lock.Context()
	lostCh := lockCtx.Done()
	var (
		lostCause error
		killer    *time.Timer
		killCh    <-chan time.Time
	)
	startGrace := func() {
		if killer == nil {
			killer = time.NewTimer(grace)
			killCh = killer.C
		}
	}
	// The loop ends when the command exits; once it has been told to stop,
	// the grace timer makes sure it does, with SIGKILL.
	for running := true; running; {
		select {
		case <-exited:
			running = false
		case s := <-sigs:
			_ = signalGroup(pgid, syscall.Signal(signum(s)))
			startGrace()
		case <-lostCh:
			lostCh = nil
			lostCause = context.Cause(lockCtx)
			fmt.Fprintf(a.stderr, "dlock: %s; sending SIGTERM to the command (SIGKILL in %v)\n", trimDlock(lostCause), grace)
			_ = signalGroup(pgid, syscall.SIGTERM)
			startGrace()
		case <-killCh:
			killCh = nil
			fmt.Fprintf(a.stderr, "dlock: the command did not exit within %v: sending SIGKILL\n", grace)
			_ = signalGroup(pgid, syscall.SIGKILL)
		}
	}
	if killer != nil {
		killer.Stop()
	}
	if lostCause != nil {
		// Whatever the command left running in its group must not go on
		// working under a lock someone else may hold by now.
		_ = signalGroup(pgid, syscall.SIGKILL)
		disarm()
		_ = lock.Release(context.Background())
		return &lostError{name: lock.Name(), cause: lostCause}
	}
	// Before the release, which may take up to --timeout: a dlock killed
	// then must not have the watchdog signal a group id that may have
	// been reused since COMMAND exited.
	disarm()
	code := exitStatus(cmd.ProcessState)
	if err := lock.Release(context.Background()); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			// Lost between two renewals (force-unlocked, say) and found
			// out only now: the end of the command may have overlapped
			// with another holder, which the caller must hear about.
			return fmt.Errorf("%w: lock %q was no longer ours when the command exited (command exit code %d)", dlock.ErrLockLost, lock.Name(), code)
		}
		// Not released: it expires with its TTL. The command's result
		// still stands.
		fmt.Fprintf(a.stderr, "dlock: warning: %v; the lock expires with its TTL\n", err)
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// lostError: the lock ended under the command, which was stopped.
type lostError struct {
	name  string
	cause error // matches dlock.ErrLockLost
}

func (e *lostError) Error() string {
	return fmt.Sprintf("lock %q lost while the command ran (%s); the command was stopped", e.name, trimDlock(e.cause))
}
func (e *lostError) Unwrap() error { return e.cause }

// trimDlock drops the "dlock: " the library starts its errors with, for
// messages that already say it.
func trimDlock(err error) string { return strings.TrimPrefix(err.Error(), "dlock: ") }

// exitStatus is the shell's view of how the command ended: its exit code,
// or 128+N when signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return ps.ExitCode()
}

// startError maps a command that could not start to the shell's codes.
func startError(name string, err error) error {
	code := exitNoExec
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		code = exitNoCmd
	}
	return &exitError{code: code, err: fmt.Errorf("run %s: %w", name, err)}
}
