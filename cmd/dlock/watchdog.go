//go:build unix

package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A watchdog stops COMMAND's process group when dlock dies without doing it
// itself: kill -9, the OOM killer, a crash. The lock is no longer renewed
// then and goes to the next holder when its lease ends, so COMMAND must not
// work on. The parent-death signal (Linux, FreeBSD) reaches only the child
// dlock started, not what that child started in its group (a script's
// children), and it does not exist on macOS; a pipe works on every Unix.
//
// The watchdog is a small sh process that leads the process group COMMAND
// then joins: the group exists, and the watchdog knows its id, before
// COMMAND runs. Were the group COMMAND's own, dlock could only name it to
// the watchdog after the fork, and a dlock killed in between left a
// COMMAND nobody stops. The watchdog ignores the signals dlock forwards to
// the group (they are meant for COMMAND) and reads a pipe whose only writer
// is dlock: "done" once COMMAND has exited. End of file before "done"
// means dlock died: the group gets SIGTERM, then SIGKILL after
// --kill-grace, as when the lock is lost; the SIGKILL ends the watchdog
// too. While the watchdog lives, its group id cannot be given to another
// group. The pipe's write end is close-on-exec, so COMMAND does not hold it
// open.
const watchdogScript = `trap '' INT TERM HUP QUIT
read -r word
[ "$word" = done ] && exit 0
kill -s TERM -- "-$$" 2>/dev/null
i=0
while [ "$i" -lt "$1" ]; do sleep 0.1; i=$((i+1)); done
kill -s KILL -- "-$$" 2>/dev/null
exit 0`

type watchdog struct {
	cmd    *exec.Cmd
	w      *os.File
	exited chan struct{}
}

// startWatchdog starts the watchdog; grace is the time between its SIGTERM
// and SIGKILL.
func startWatchdog(grace time.Duration) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// The loop's 0.1s sleeps, rounded up; a grace beyond a day (no one
	// means it) is a day, so the count cannot overflow.
	grace = min(grace, 24*time.Hour)
	ticks := (grace + 100*time.Millisecond - 1) / (100 * time.Millisecond)
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "dlock-watchdog", strconv.FormatInt(int64(ticks), 10))
	cmd.Stdin = r // stdout and stderr stay /dev/null: the watchdog must not hold dlock's open
	// dlock's own PATH first, where sleep is found on systems without
	// /usr/bin/sleep (NixOS): without sleep the grace loop would spin
	// through its ticks and SIGKILL at once.
	cmd.Env = []string{"PATH=" + strings.Trim(os.Getenv("PATH")+":/usr/bin:/bin", ":")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	wd := &watchdog{cmd: cmd, w: w, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(wd.exited)
	}()
	return wd, nil
}

// pgid is the id of the watchdog's process group, the one COMMAND joins.
func (wd *watchdog) pgid() int { return wd.cmd.Process.Pid }

// disarm tells the watchdog that COMMAND has exited (or never started),
// and waits for it to end. Called before the lock is released: a dlock
// killed during the release must not have the watchdog stop what COMMAND
// left running in the group, as a run that ends as usual leaves it. The
// write fails harmlessly if dlock's SIGKILL to the group ended the
// watchdog already.
func (wd *watchdog) disarm() {
	_, _ = wd.w.WriteString("done\n")
	_ = wd.w.Close()
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-wd.exited:
	case <-t.C: // a stuck sh must not outlive us, nor signal the group later
		_ = wd.cmd.Process.Kill()
		<-wd.exited
	}
}
