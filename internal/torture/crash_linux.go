package torture

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// A machine crash loses what the kernel had not written to disk; SIGKILL of
// redis-server loses nothing its write calls handed to the kernel, so a
// killed Redis with appendfsync everysec comes back with every grant, and
// shows nothing of what everysec risks. The crash fault makes the loss
// real: the server runs with fsyncLogSource preloaded, which appends the
// AOF file's size as of each fdatasync or fsync that returned (everything
// up to that size was written before the call, so it is on disk), and the
// crash cuts the AOF back to the last size logged before starting the
// server again. A write WAITAOF confirmed is at or below that size (the
// server confirms an offset only after the fsync that covers it returned),
// so the cut never loses a confirmed grant, and loses everything after it,
// as a power cut would (at most: pages the kernel flushed on its own would
// survive one).
const fsyncLogSource = `
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void logged(int fd, const struct stat *st) {
	const char *log = getenv("DLOCK_FSYNC_LOG");
	char link[64], path[4096], line[4200];
	ssize_t n;
	int l, out;
	if (!log) return;
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof path - 1);
	if (n < 0) return;
	path[n] = 0;
	if (!strstr(path, ".incr.aof")) return;
	l = snprintf(line, sizeof line, "%lld %s\n", (long long)st->st_size, path);
	out = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
	if (out < 0) return;
	if (write(out, line, l) < 0) {}
	close(out);
}

int fdatasync(int fd) {
	static int (*real)(int);
	struct stat st;
	int have, r;
	if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
	have = fstat(fd, &st) == 0;
	r = real(fd);
	if (r == 0 && have) logged(fd, &st);
	return r;
}

int fsync(int fd) {
	static int (*real)(int);
	struct stat st;
	int have, r;
	if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	have = fstat(fd, &st) == 0;
	r = real(fd);
	if (r == 0 && have) logged(fd, &st);
	return r;
}
`

// crashEnv builds the fsync log library in dir with gcc and returns the
// environment that preloads it, logging to dir/fsync.log.
func crashEnv(ctx context.Context, dir string) (env []string, log string, err error) {
	src := filepath.Join(dir, "fsynclog.c")
	lib := filepath.Join(dir, "fsynclog.so")
	if err := os.WriteFile(src, []byte(fsyncLogSource), 0o644); err != nil {
		return nil, "", err
	}
	out, err := exec.CommandContext(ctx, "gcc", "-shared", "-fPIC", "-O2", "-o", lib, src, "-ldl").CombinedOutput()
	if err != nil {
		return nil, "", fmt.Errorf("torture: the crash fault needs gcc to build its fsync log (apt-get install -y gcc): %v: %s", err, out)
	}
	log = filepath.Join(dir, "fsync.log")
	return []string{"LD_PRELOAD=" + lib, "DLOCK_FSYNC_LOG=" + log}, log, nil
}

// cutToFsynced cuts each AOF file in log back to the last size its fsyncs
// covered, as a machine crash would leave it, and returns the bytes cut.
// The server must be dead. A file never fsynced is left alone: the log
// says nothing of it (Redis fsyncs a new AOF file before it uses it).
func cutToFsynced(log string) (int64, error) {
	data, err := os.ReadFile(log)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, nil
		}
		return 0, err
	}
	last := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		size, path, ok := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseInt(size, 10, 64)
		if !ok || err != nil {
			continue // a line cut by the kill
		}
		last[path] = n
	}
	var cut int64
	for path, n := range last {
		st, err := os.Stat(path)
		if err != nil {
			continue // rewritten and removed since
		}
		if st.Size() > n {
			if err := os.Truncate(path, n); err != nil {
				return cut, err
			}
			cut += st.Size() - n
		}
	}
	return cut, nil
}
