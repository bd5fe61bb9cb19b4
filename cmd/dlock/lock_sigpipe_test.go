//go:build unix

package main

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// A script that closes its end of dlock lock's stdout before the NAME FENCE
// line arrives (dlock lock x | true, a coproc whose reader died) must not
// leave the lock held by a dead process until its TTL: printLocked's error
// path releases it, but only if dlock lives to see the EPIPE. Go kills a
// program with SIGPIPE on a write to a broken pipe on fd 1 or 2 unless it
// has called signal.Notify for SIGPIPE.
func TestLockBrokenStdoutReleases(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close() // nobody reads: the first write gets EPIPE / SIGPIPE
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := command(ctx, srv, "lock", "--ttl", "30s", "brokenpipe")
	cmd.Stdout = w
	err = cmd.Run()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("dlock lock was killed by %v writing its line to a closed pipe (err %v)", ws.Signal(), err)
	}
	if n := rdb.Exists(context.Background(), lockKey("brokenpipe")).Val(); n != 0 {
		ttl := rdb.PTTL(context.Background(), lockKey("brokenpipe")).Val()
		t.Errorf("lock brokenpipe still held by an exited dlock for another %v", ttl.Round(time.Second))
	}
}
