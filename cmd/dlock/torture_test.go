package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/torture"
)

// keysOf lists every key of a database, sorted.
func keysOf(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

func dbClient(t *testing.T, srv *redistest.Server, db int) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: db})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func setKey(t *testing.T, rdb *redis.Client, key string) {
	t.Helper()
	if err := rdb.Set(context.Background(), key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// checkTable checks the table of a run that found nothing wrong: a row for
// each scenario, each with acquisitions, and "violations: 0" last.
func checkTable(t *testing.T, r result, scenarios ...string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("torture: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if last := lines[len(lines)-1]; last != "violations: 0" {
		t.Errorf("last line %q, want \"violations: 0\"\n%s", last, r.stdout)
	}
	for _, sc := range scenarios {
		found := false
		for _, l := range lines {
			if cells := strings.Split(l, "|"); len(cells) > 3 && strings.TrimSpace(cells[1]) == sc {
				found = true
				if n := strings.TrimSpace(cells[2]); n == "0" {
					t.Errorf("scenario %s: no acquisitions: %s", sc, l)
				}
			}
		}
		if !found {
			t.Errorf("no row for scenario %s in:\n%s", sc, r.stdout)
		}
	}
}

// With --local the run needs no Redis of the user's, and may restart its own.
func TestTortureLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("torture runs for several seconds")
	}
	r := dlockRun(t, nil, "torture", "--local", "--duration", "6s", "--scenario", "kill,restart-aof")
	checkTable(t, r, "kill", "restart-aof")
	if !strings.Contains(r.stderr, "[1/2] kill, 3s") {
		t.Errorf("no progress line for the first scenario in stderr:\n%s", r.stderr)
	}
}

// On a database holding keys of someone else, torture refuses without
// --yes, and writes nothing; the same for the resource's Redis.
func TestTortureRefusesDatabaseInUse(t *testing.T) {
	srv := redistest.Start(t)
	db5 := dbClient(t, srv, 5)
	setKey(t, db5, "users-key")
	r := dlockRun(t, nil, "-u", "redis://"+srv.Addr+"/5", "torture", "--duration", "3s")
	if r.code != exitUsage || !strings.Contains(r.stderr, `database 5 of `+srv.Addr+` holds 1 key(s) that are not the run's ("users-key")`) ||
		!strings.Contains(r.stderr, "--yes") {
		t.Errorf("torture on a database in use: exit %d, stderr %q", r.code, r.stderr)
	}
	if keys := keysOf(t, db5); !slices.Equal(keys, []string{"users-key"}) {
		t.Errorf("keys after the refusal: %v", keys)
	}

	res := redistest.Start(t)
	setKey(t, res.Client(t), "resource-users-key")
	r = dlockRun(t, nil, "-u", "redis://"+srv.Addr+"/6", "torture", "--resource", res.Addr, "--duration", "3s")
	if r.code != exitUsage || !strings.Contains(r.stderr, "(--resource) holds 1 key(s)") {
		t.Errorf("torture with a resource in use: exit %d, stderr %q", r.code, r.stderr)
	}
	if keys := keysOf(t, dbClient(t, srv, 6)); len(keys) != 0 {
		t.Errorf("keys in the lock's database after the refusal: %v", keys)
	}
}

// With --yes it runs on a database in use, its locks and the resource under
// its prefix, and deletes only its own keys: the user's stay, in the lock's
// database, in the others, and in the resource's Redis.
func TestTortureYesDeletesOnlyItsOwnKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("torture runs for several seconds")
	}
	srv, res := redistest.Start(t), redistest.Start(t)
	db3, db0, resDB := dbClient(t, srv, 3), srv.Client(t), res.Client(t)
	setKey(t, db3, "users-key")
	setKey(t, db0, "other-db-key")
	setKey(t, resDB, "resource-users-key")
	r := dlockRun(t, nil, "-u", "redis://"+srv.Addr+"/3", "torture", "--yes", "--resource", res.Addr,
		"--duration", "4s", "--scenario", "mixed", "--workers", "6")
	checkTable(t, r, "mixed")
	if !strings.Contains(r.stderr, "failover you trigger") {
		t.Errorf("stderr does not say how a failover would show:\n%s", r.stderr)
	}
	for _, c := range []struct {
		rdb  *redis.Client
		want string
	}{{db3, "users-key"}, {db0, "other-db-key"}, {resDB, "resource-users-key"}} {
		if keys := keysOf(t, c.rdb); !slices.Equal(keys, []string{c.want}) {
			t.Errorf("keys after the run: %v, want only %q", keys, c.want)
		}
	}
}

// Cancelled mid-run (Ctrl-C), torture stops its workers, deletes its keys,
// prints what it saw and exits 130. It runs in this process, its workers
// being this test binary again (see TestMain).
func TestTortureInterrupted(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	setKey(t, rdb, "users-key")
	var out, errb syncBuffer
	d := deps{stdout: &out, stderr: &errb, getenv: func(string) string { return "" },
		environ: os.Environ, self: func() (string, error) { return os.Args[0], nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- execute(ctx, []string{"--addr", srv.Addr, "torture", "--yes", "--duration", "60s", "--workers", "4"}, d)
	}()
	var prefix string
	waitFor(t, "torture's keys", func() bool {
		for _, k := range keysOf(t, rdb) {
			if p, _, ok := strings.Cut(k, "{"); ok && strings.HasPrefix(p, "dlock-torture:") {
				prefix = p
				return true
			}
		}
		return false
	})
	time.Sleep(500 * time.Millisecond)
	cancel()
	select {
	case code := <-done:
		if code != exitSignal+2 {
			t.Errorf("exit %d, want %d; stderr:\n%s", code, exitSignal+2, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("torture still running 20s after its cancellation; stderr:\n%s", errb.String())
	}
	if !strings.Contains(out.String(), "(interrupted)") || !strings.Contains(out.String(), "violations: 0") {
		t.Errorf("stdout:\n%s", out.String())
	}
	if keys := keysOf(t, rdb); !slices.Equal(keys, []string{"users-key"}) {
		t.Errorf("keys after the interrupted run: %v", keys)
	}
	if pids := workersOf(prefix); len(pids) > 0 {
		t.Errorf("worker processes left behind: %v", pids)
	}
}

// workersOf lists the torture workers still running for the run of prefix.
func workersOf(prefix string) []string {
	envs, _ := filepath.Glob("/proc/[0-9]*/environ")
	var pids []string
	for _, f := range envs {
		b, err := os.ReadFile(f)
		if err == nil && bytes.Contains(b, []byte(torture.WorkerEnv+"=")) && bytes.Contains(b, []byte(prefix)) {
			pids = append(pids, filepath.Base(filepath.Dir(f)))
		}
	}
	return pids
}

// syncBuffer is a bytes.Buffer that a test may read while a command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// With no Redis named and none at the default address, torture says so, and
// points at --local, rather than start one unasked.
func TestTortureNoRedisAtDefault(t *testing.T) {
	if c, err := net.Dial("tcp", defaultAddr); err == nil {
		_ = c.Close()
		t.Skipf("a Redis answers at %s: this test would run torture on it", defaultAddr)
	}
	var out, errb bytes.Buffer
	d := deps{stdout: &out, stderr: &errb, getenv: func(string) string { return "" },
		environ: os.Environ, self: func() (string, error) { return os.Args[0], nil }}
	code := execute(context.Background(), []string{"torture"}, d)
	if code != exitRedis || !strings.Contains(errb.String(), "no Redis answers at "+defaultAddr) ||
		!strings.Contains(errb.String(), "--local") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// The plan printed before a run is the time it will take: scenarios have
// a least duration (mixed 12s), so a --duration too short for them is
// stretched, and the total said is the sum of what each will run.
func TestTorturePlanSaysTheRealTotal(t *testing.T) {
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens there: the run stops after its plan.
	r := dlockRun(t, nil, "--addr", "127.0.0.1:"+strconv.Itoa(port), "torture", "--duration", "2s", "--scenario", "kill,mixed")
	if !strings.Contains(r.stderr, "15s in all") || strings.Contains(r.stderr, "6s in all") {
		t.Errorf("torture --duration 2s of kill (3s least) and mixed (12s least): stderr %q; want \"15s in all\"", r.stderr)
	}
}

// An unknown scenario is answered with every scenario there is, those of
// --local too, saying which need it.
func TestTortureUnknownScenarioListsLocalOnes(t *testing.T) {
	r := dlockRun(t, nil, "torture", "--scenario", "bogus")
	if r.code != exitUsage || !strings.Contains(r.stderr, "kill") || !strings.Contains(r.stderr, "with --local: restart-aof, restart-empty, evict") {
		t.Errorf("--scenario bogus: exit %d, stderr %q; want %d listing the --local scenarios too", r.code, r.stderr, exitUsage)
	}
	r = dlockRun(t, nil, "torture", "--scenario", "evict", "--duration", "1s", "--addr", "127.0.0.1:1")
	if r.code != exitUsage || !strings.Contains(r.stderr, `"evict" needs --local`) {
		t.Errorf("--scenario evict without --local: exit %d, stderr %q; want %d saying it needs --local", r.code, r.stderr, exitUsage)
	}
}
