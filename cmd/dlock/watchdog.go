package main

import (
	"fmt"
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
// The watchdog is a small sh process in a process group of its own (so
// neither a Ctrl-C at the terminal nor a signal to COMMAND's group reaches
// it), reading a pipe whose only writer is dlock: first the group's id, then
// "done" once COMMAND has exited. End of file before "done" means dlock
// died: the group gets SIGTERM, then SIGKILL after --kill-grace, as when
// the lock is lost. The pipe's write end is close-on-exec, so COMMAND does
// not hold it open.
const watchdogScript = `trap '' INT TERM HUP QUIT
read -r pgid || exit 0
read -r word
[ "$word" = done ] && exit 0
kill -s TERM -- "-$pgid" 2>/dev/null || exit 0
i=0
while [ "$i" -lt "$1" ] && kill -s 0 -- "-$pgid" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
kill -s KILL -- "-$pgid" 2>/dev/null
exit 0`

type watchdog struct {
	cmd    *exec.Cmd
	w      *os.File
	armed  bool
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

// arm tells the watchdog which group to stop.
func (wd *watchdog) arm(pgid int) {
	_, _ = fmt.Fprintf(wd.w, "%d\n", pgid)
	wd.armed = true
}

// disarm tells the watchdog that COMMAND has exited (or never started),
// and waits for it to end. Called before the lock is released: a dlock killed during the release
// must not have a group id signalled that may belong to someone else by then.
func (wd *watchdog) disarm() {
	if wd.armed {
		_, _ = wd.w.WriteString("done\n")
	} // else end of file before a group id: nothing to stop
	_ = wd.w.Close()
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-wd.exited:
	case <-t.C: // a stuck sh: it would signal nothing without a group id, but it must not outlive us
		_ = wd.cmd.Process.Kill()
		<-wd.exited
	}
}
