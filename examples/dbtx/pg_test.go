//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// startPostgres starts a throwaway PostgreSQL cluster for one test, on a free
// loopback port with its unix socket in its own directory, and returns a DSN
// for it. Without initdb and postgres (on PATH or in Debian's
// /usr/lib/postgresql/*/bin) the test is skipped, with the reason: the
// SQLite tests run everywhere, PostgreSQL where it is installed, which
// make test sees to.
func startPostgres(t *testing.T) string {
	t.Helper()
	initdb, err1 := pgBinary("initdb")
	postgres, err2 := pgBinary("postgres")
	if err1 != nil || err2 != nil {
		t.Skip("PostgreSQL not tested: initdb and postgres are neither on PATH nor in /usr/lib/postgresql/*/bin " +
			"(Debian: apt-get install -y postgresql; make test installs it)")
	}

	// PostgreSQL refuses to run as root: as root, the cluster belongs to
	// the postgres user (or nobody), in a directory that user can reach;
	// t.TempDir's parent is private to root.
	dir := t.TempDir()
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = unprivileged(t)
		var err error
		if dir, err = os.MkdirTemp("", "dbtx-pg-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}

	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor
	// fsync off: the cluster is thrown away, and commits without a disk
	// flush keep the test short. It does not change what a transaction
	// sees, only how long a commit takes.
	srv := exec.Command(postgres, "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=50")
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	srv.Stdout, srv.Stderr = logFile, logFile
	if err := srv.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = srv.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		// SIGQUIT: immediate shutdown, nothing to keep.
		_ = srv.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
	})

	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	for {
		s, err := OpenPostgres(dsn)
		if err == nil {
			_ = s.Close()
			return dsn
		}
		select {
		case <-exited:
			t.Fatalf("postgres exited at start: %v\n%s", err, readLog(logPath))
		case <-ctx.Done():
			t.Fatalf("postgres did not accept connections in time: %v\n%s", err, readLog(logPath))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// unprivileged returns the credentials of the postgres user, or of nobody.
func unprivileged(t *testing.T) *syscall.Credential {
	t.Helper()
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		}
	}
	t.Skip("PostgreSQL not tested: running as root, and no postgres or nobody user to run it as")
	return nil
}

func readLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}

// pgBinary finds a PostgreSQL program on PATH, else where Debian's packages
// put it (they leave /usr/lib/postgresql/<version>/bin off PATH).
func pgBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(found) == 0 {
		return "", fmt.Errorf("%s: not found", name)
	}
	return found[len(found)-1], nil
}
